"""gau_keras: GAU-alpha, RoFormerV2 and SRU++ for Keras 3 / TensorFlow 2.

The public names are resolved lazily so that light-weight parts (the tokenizer,
the segmenters) can be imported in processes that must never import
TensorFlow, e.g. the LAC worker processes (paddle segfaults when it is imported
after TensorFlow).

    from gau_keras import build_transformer_model, Tokenizer
    model = build_transformer_model(config_path, checkpoint_path, model="gau_alpha")
"""
import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "build_transformer_model": "gau_keras.models.builder",
    "Tokenizer": "gau_keras.tokenizers",
    "load_vocab": "gau_keras.tokenizers",
    "LAMB": "gau_keras.optimizers",
    "PiecewiseLinearDecay": "gau_keras.optimizers",
    "layers": "gau_keras.layers",
    "ops": "gau_keras.ops",
    "models": "gau_keras.models",
    "optimizers": "gau_keras.optimizers",
    "checkpoints": "gau_keras.checkpoints",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    module_name = _PUBLIC.get(name)
    if module_name is None:
        raise AttributeError(f"module 'gau_keras' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name.endswith("." + name) else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
