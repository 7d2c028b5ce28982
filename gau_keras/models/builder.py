"""``build_transformer_model``: the bert4keras entry point."""

import os

# the architectures register their names (registry.register) as they are imported
import gau_keras.models.albert  # noqa: F401
import gau_keras.models.bert  # noqa: F401
import gau_keras.models.electra  # noqa: F401
import gau_keras.models.gau_alpha  # noqa: F401
import gau_keras.models.gpt  # noqa: F401
import gau_keras.models.nezha  # noqa: F401
import gau_keras.models.roformer  # noqa: F401
import gau_keras.models.roformer_v2  # noqa: F401
import gau_keras.models.srupp  # noqa: F401
import gau_keras.models.t5  # noqa: F401
from gau_keras.models.base import BUILD_ARGUMENTS
from gau_keras.models.config import read_json, resolve_arguments
from gau_keras.models.huggingface import HF_MODEL_TYPES, hf_config, hf_model_name, is_hf_directory, read_hf_directory
from gau_keras.models.registry import (  # noqa: F401  (MODELS, model_names: their old home, still importable)
    MODELS,
    backbone_class,
    model_names,
    name_arguments,
    resolve_model_class,
)


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


#: what ``build_transformer_model`` applies to the model it returns (``transformer.model``): the
#: bert4keras face (``gau_keras.bert4keras.model``, above the models) adds its Keras 2 calls
#: there; the models themselves (Backbones, ``Transformer.build``) are plain ``keras.Model``s
MODEL_FACES = []


def _build(cls, configs, build_arguments):
    """The built builder object of ``cls``: its model is the class's ``Backbone`` (a config
    of its own, rebuilt from ``.keras`` files) unless the model takes what a config cannot
    hold (layers of another model, tensors as build arguments) or ``cls`` has no Backbone."""
    backbone = backbone_class(cls)
    if (
        backbone is not None
        and configs.get("layers") is None
        and not any(value is not None for value in build_arguments.values())
    ):
        return backbone(**configs).transformer
    transformer = cls(**configs)
    transformer.build(**build_arguments)
    return transformer


def _hugging_face(config_path, checkpoint_path, model):
    """(config_path, checkpoint_path, model) with a Hugging Face model directory (as
    ``checkpoint_path``, or as ``config_path`` without a checkpoint) read: its config.json
    mapped to our arguments, its weights to our names, the model from its ``model_type``
    unless one is named; a config.json alone names the model only when ``model=None``."""
    if is_hf_directory(checkpoint_path):
        name, config, checkpoint = read_hf_directory(checkpoint_path)
        if config_path is not None and os.path.abspath(config_path) != os.path.join(
            os.path.abspath(checkpoint_path), "config.json"
        ):
            config = config_path  # a config of one's own wins over the directory's
        return config, checkpoint, model or name
    if model is None and isinstance(config_path, (str, os.PathLike)) and os.path.isfile(config_path):
        raw = read_json(config_path)
        if raw.get("model_type") in HF_MODEL_TYPES:
            return hf_config(raw, os.fspath(config_path)), checkpoint_path, hf_model_name(raw, config_path)
    return config_path, checkpoint_path, model or "bert"


def build_transformer_model(
    config_path=None, checkpoint_path=None, model=None, application="encoder", return_keras_model=True, **kwargs
):
    """Builds a model, optionally loading an original TF1 checkpoint.

    Args:
        config_path: bert_config.json (or HF config.json) path, a dict of
            its keys, or None.
        checkpoint_path: TF1 checkpoint prefix or directory, a Hugging Face
            model directory (config.json + model.safetensors / pytorch_model.bin,
            sharded or not: ``gau_keras.models.huggingface``), a
            ``{name: array}`` dict, or None.
        model: None (a Hugging Face directory's or config.json's
            ``model_type``, else 'bert', as in bert4keras), 'bert', 'roberta', 'albert',
            'albert_unshared', 'nezha', 'roformer', 'electra', 'roformer_v2',
            'gau_alpha', 'srupp', 'gpt', 'gpt2', 'gpt2_ml', T5's 't5' (= 't5.1.0'),
            't5.1.1', 'mt5.1.1' and their '_encoder' / '_decoder' halves (e.g.
            'mt5.1.1_encoder'), or a ``Transformer`` subclass.
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
    config_path, checkpoint_path, model = _hugging_face(config_path, checkpoint_path, model)
    cls = resolve_model_class(model)
    kwargs.update(name_arguments(model))  # bert4keras: 't5.1.1' / 'mt5.1.1' fix T5's version
    build_arguments = {k: kwargs.pop(k) for k in BUILD_ARGUMENTS if k in kwargs}
    kwargs["application"] = application  # an extend_with_* class replaces it with its own
    configs = resolve_arguments(cls, kwargs, config_path, also_accepted=BUILD_ARGUMENTS)
    transformer = _build(cls, configs, build_arguments)
    if checkpoint_path is not None:
        transformer.load_weights_from_checkpoint(checkpoint_path)
    for face in MODEL_FACES:
        transformer.model = face(transformer.model)
    return transformer.model if return_keras_model else transformer
