"""``build_transformer_model``: the bert4keras entry point."""
import logging
import os

from gau_keras.models.albert import ALBERT, ALBERT_Unshared
from gau_keras.models.backbone import BACKBONES
from gau_keras.models.base import BUILD_ARGUMENTS
from gau_keras.models.bert import BERT
from gau_keras.models.config import CONFIG_ALIASES, METADATA_KEYS, accepted_arguments, read_config, validate
from gau_keras.models.electra import ELECTRA
from gau_keras.models.gau_alpha import GAU_alpha
from gau_keras.models.nezha import NEZHA
from gau_keras.models.roformer import RoFormer
from gau_keras.models.roformer_v2 import RoFormerV2
from gau_keras.models.srupp import SRUppModel

logger = logging.getLogger(__name__)

#: model name -> class (bert4keras's names first); other modules may register more.
MODELS = {
    "bert": BERT,
    "roberta": BERT,
    "albert": ALBERT,
    "albert_unshared": ALBERT_Unshared,
    "nezha": NEZHA,
    "roformer": RoFormer,
    "electra": ELECTRA,
    "gau_alpha": GAU_alpha,
    "gau-alpha": GAU_alpha,
    "roformer_v2": RoFormerV2,
    "roformer-v2": RoFormerV2,
    "roformerv2": RoFormerV2,
    "srupp": SRUppModel,
}


def model_names(segment_ids=None):
    """One name per registered model class (the first registered), in registry order:
    what a command line lists (every key of `MODELS` is accepted). ``segment_ids=True``:
    only the models that read segment ids (what fine-tuning feeds)."""
    names = {}
    for name, cls in MODELS.items():
        if segment_ids is None or cls.takes_segment_ids == segment_ids:
            names.setdefault(cls, name)
    return tuple(names.values())


#: bert4keras's other model names: not implemented here (said so, not "unknown")
BERT4KERAS_ONLY_MODELS = ("gpt", "gpt2", "gpt2_ml", "t5", "t5_encoder", "t5_decoder", "t5.1.0", "t5.1.1",
                          "mt5.1.1")

def _with_application(base, application):
    class Model(base):
        def __init__(self, *args, **kwargs):
            kwargs["application"] = application
            super().__init__(*args, **kwargs)

    Model.__name__ = Model.__qualname__ = f"{base.__name__}_{application}"
    return Model


def extend_with_language_model(base):
    """bert4keras's factory: ``base`` with the causal (lower-triangular)
    attention mask and the MLM head, i.e. ``application='lm'``."""
    return _with_application(base, "lm")


def extend_with_unified_language_model(base):
    """bert4keras's factory: ``base`` with UniLM's seq2seq mask (segment 0
    sees itself, segment 1 also its own past) and the MLM head, i.e.
    ``application='unilm'``."""
    return _with_application(base, "unilm")


def resolve_model_class(model):
    if isinstance(model, str):
        key = model.lower()
        if key not in MODELS and key.split("_")[0] in BERT4KERAS_ONLY_MODELS:
            raise ValueError(f"model {model!r}: bert4keras's {key} is not implemented in gau_keras, which has "
                             f"{sorted(MODELS)} or a Transformer subclass")
        if key not in MODELS:
            raise ValueError(f"unknown model {model!r}; expected one of {sorted(MODELS)} or a class")
        return MODELS[key]
    if isinstance(model, type):
        return model
    raise TypeError(f"model must be a name or a class, got {type(model).__name__}")


def _build(cls, configs, build_arguments):
    """The built builder object of ``cls``: its model is the class's ``Backbone`` (a config
    of its own, rebuilt from ``.keras`` files) unless the model takes what a config cannot
    hold (layers of another model, tensors as build arguments) or ``cls`` has no Backbone."""
    backbone = BACKBONES.get(cls)
    if backbone is not None and configs.get("layers") is None and not any(
            value is not None for value in build_arguments.values()):
        return backbone(**configs).transformer
    transformer = cls(**configs)
    transformer.build(**build_arguments)
    return transformer


def build_transformer_model(config_path=None, checkpoint_path=None, model="bert",
                            application="encoder", return_keras_model=True, **kwargs):
    """Builds a model, optionally loading an original TF1 checkpoint.

    Args:
        config_path: bert_config.json (or HF config.json) path, a dict of
            its keys, or None.
        checkpoint_path: TF1 checkpoint prefix or directory, a
            ``{name: array}`` dict, or None.
        model: 'bert' (the default, as in bert4keras), 'roberta', 'albert',
            'albert_unshared', 'nezha', 'roformer', 'electra', 'roformer_v2',
            'gau_alpha', 'srupp', or a ``Transformer`` subclass.
        application: 'encoder', 'lm' (causal) or 'unilm'.
        return_keras_model: return the ``keras.Model`` (True) or the builder
            object (``.model``, ``.inputs``, ``.outputs``, ``.layers``,
            ``.apply``, ``.initializer``, ...).
        **kwargs: constructor arguments / config overrides (``with_mlm``,
            ``with_pool``, ``keep_tokens``, ``compound_tokens``,
            ``segment_vocab_size``, ``sequence_length``, ``custom_position_ids``,
            ``ignore_invalid_weights``, ``unused_checkpoint_variables``
            ('warn' | 'error' | 'ignore': checkpoint variables the model does not
            use), ``softmax_plus_min_len``, ``layers``/``prefix``/``name``, ...) and
            bert4keras's build arguments (``additional_input_layers``, ...). They
            win over the config file; an unknown keyword is an error, a
            bert4keras option these models cannot honour an error saying why.
    """
    cls = resolve_model_class(model)
    kwargs = {CONFIG_ALIASES.get(k, k): v for k, v in kwargs.items()}   # bert_config names work too
    build_arguments = {k: kwargs.pop(k) for k in BUILD_ARGUMENTS if k in kwargs}
    accepted = accepted_arguments(cls)
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise TypeError(f"build_transformer_model: unknown argument(s) {unknown} for {cls.__name__}; "
                        f"accepted: {sorted(accepted | set(BUILD_ARGUMENTS))}")
    configs = {}
    if config_path is not None:
        where = None if isinstance(config_path, dict) else os.fspath(config_path)
        file_config = read_config(config_path if where is None else where)
        ignored = sorted(k for k in file_config if k not in accepted and k not in METADATA_KEYS)
        if ignored:
            logger.warning("config %s: ignoring key(s) %s that %s does not use", config_path, ignored,
                           cls.__name__)
        configs.update({k: v for k, v in file_config.items() if k in accepted})
    configs.update(kwargs)
    configs["application"] = application.lower()   # an extend_with_* class replaces it with its own
    missing = [k for k in cls.required_config_keys if k not in configs]
    if missing:
        where = (f"config {config_path!r}" if isinstance(config_path, (str, os.PathLike))
                 else "the config" if config_path else "the arguments (no config_path given)")
        raise ValueError(f"build_transformer_model: {where} lacks {missing}")
    validate(configs, None if config_path is None or isinstance(config_path, dict) else os.fspath(config_path),
             cls.__name__)
    transformer = _build(cls, configs, build_arguments)
    if checkpoint_path is not None:
        transformer.load_weights_from_checkpoint(checkpoint_path)
    return transformer.model if return_keras_model else transformer
