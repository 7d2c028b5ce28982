"""gau_keras: GAU-alpha, RoFormerV2 and SRU++ for Keras 3 / TensorFlow 2.

``import gau_keras`` registers every serialisable class (layers, models'
layers, initializers, optimizers, losses) with Keras, so a ``.keras`` file of
a gau_keras model loads after that one import.

Processes that must never import TensorFlow (the LAC and corpus worker
processes: paddle segfaults when it is imported after TensorFlow) run with
``GAU_KERAS_TF_FREE=1``; then ``import gau_keras`` registers nothing and the
light-weight modules (tokenizers, segmenters, data.mlm) stay TF-free. Our own
spawners set it for their children (``tf_free_children``).

    from gau_keras import build_transformer_model, Tokenizer
    model = build_transformer_model(config_path, checkpoint_path, model="gau_alpha")

Design notes: docs/architecture.md.
"""

import contextlib
import importlib
import os

from gau_keras import cli_env  # noqa: F401  (first: the command line's TensorFlow log level, before TF loads)

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

#: environment variable that marks a process which must not import TensorFlow
TF_FREE_ENV = "GAU_KERAS_TF_FREE"
#: the modules whose import registers a serialisable class
SERIALIZABLE_MODULES = (
    "gau_keras.initializers",
    "gau_keras.layers",
    "gau_keras.models",
    "gau_keras.optimizers",
    "gau_keras.losses",
    "gau_keras.backend",
)


def register_serializables():
    """Imports every module that registers Keras-serialisable classes."""
    for module in SERIALIZABLE_MODULES:
        importlib.import_module(module)


@contextlib.contextmanager
def tf_free_children():
    """Within this block, processes started (``spawn``) inherit
    ``GAU_KERAS_TF_FREE=1``: their ``import gau_keras`` does not import TensorFlow."""
    previous = os.environ.get(TF_FREE_ENV)
    os.environ[TF_FREE_ENV] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TF_FREE_ENV, None)
        else:
            os.environ[TF_FREE_ENV] = previous


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


if os.environ.get(TF_FREE_ENV) != "1":
    register_serializables()
