"""The one reader of model configs (bert_config.json, the PyTorch port's
config.json, or the same keys inline in a pretraining config).

``read_config(source)`` returns constructor arguments: bert_config names are
mapped to the constructor's (``hidden_dropout_prob`` -> ``dropout_rate``, ...),
keys fixed by these models are checked (``use_bias`` must be false), and every
value the models use is validated, each error naming the key and the file.
``build_transformer_model`` and ``pretrain/`` both go through it, so a config
that builds a model also pretrains one. ``resolve_arguments(cls, arguments, config)`` is the one
resolution and check of a model's constructor arguments (the builder's, every ``Backbone``'s, a
``.keras`` file's config): aliases, unknown names, the config file's keys, missing names, then
``validate``; errors name the model.

Design notes: docs/models.md (The TF1 checkpoint).
"""

import inspect
import json
import logging
import os

import keras

from gau_keras.errors import ConfigError
from gau_keras.ops import ATTENTION_NORMALIZATIONS

logger = logging.getLogger(__name__)

#: bert_config.json / HF config.json names -> constructor argument names.
CONFIG_ALIASES = {
    "max_position_embeddings": "max_position",
    "hidden_dropout_prob": "dropout_rate",
    "attention_probs_dropout_prob": "attention_dropout_rate",
    "type_vocab_size": "segment_vocab_size",
    "layer_norm_eps": "layer_norm_epsilon",
}

#: keys of released configs that carry no information for these models.
METADATA_KEYS = {
    "architectures",
    "model_type",
    "torch_dtype",
    "transformers_version",
    "initializer_range",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "directionality",
    "pooler_fc_size",
    "pooler_num_attention_heads",
    "pooler_num_fc_layers",
    "pooler_size_per_head",
    "pooler_type",
    "gradient_checkpointing",
    "use_cache",
    "norm_type",
    "classifier_dropout",
}

#: HF-config keys that must hold these values for the models here.
REQUIRED_VALUES = {"use_bias": False, "attention_scale": True}

#: integer keys and their least value
_INTEGERS = {
    "vocab_size": 1,
    "hidden_size": 1,
    "num_hidden_layers": 1,
    "num_attention_heads": 1,
    "intermediate_size": 1,
    "attention_key_size": 1,
    "attention_head_size": 1,
    "embedding_size": 1,
    "segment_vocab_size": 0,
    "max_position": 1,
    "sequence_length": 1,
    "softmax_plus_min_len": 1,
    "proj_size": 1,
    "num_heads": 1,
    "memory_length": 0,
}
_RATES = ("dropout_rate", "attention_dropout_rate")
_POSITIVE_FLOATS = ("layer_norm_epsilon",)
#: head options: True (the head's own activation), False, or an activation name
_HEAD_OPTIONS = ("with_mlm", "with_pool", "with_discriminator", "with_lm")


def _where(where, model=None):
    if model:
        return f"{model} config {where!r}" if where else model
    return f"config {where!r}" if where else "model config"


def read_json(path):
    """The JSON object of a config file; errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except OSError as e:
        raise FileNotFoundError(f"cannot read config {path!r}: {e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"config {path!r} is not UTF-8 text: {e}") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"config {path!r} is not valid JSON: {e}") from e
    if not isinstance(config, dict):
        raise ConfigError(f"config {path!r} must hold a JSON object, got {type(config).__name__}")
    return config


def read_config(source, where=None):
    """Constructor arguments from a config file path or a dict of its keys.

    Args:
        source: path of a bert_config.json / config.json, or a dict.
        where: the name errors give for a dict source (e.g. the pretraining
            config file it came from).
    Returns:
        a new dict: aliases mapped (an explicit constructor name wins over its
        alias), fixed keys removed after checking, values validated.
    """
    if isinstance(source, dict):
        config = dict(source)
    else:
        where = os.fspath(source)
        config = read_json(where)
    for key, value in REQUIRED_VALUES.items():
        if key in config and config.pop(key) != value:
            raise ConfigError(
                f"{_where(where)}: {key}={source[key] if isinstance(source, dict) else not value!r} "
                f"is not supported (these models require {key}={value!r})"
            )
    for source_key, target in CONFIG_ALIASES.items():
        if source_key in config:
            value = config.pop(source_key)
            config.setdefault(target, value)
    validate(config, where)
    return config


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def accepted_arguments(cls):
    """The keyword arguments the constructors of ``cls`` and its bases name."""
    names = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        names.update(
            n for n, p in params.items() if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
    return names


class UnknownArgumentError(ConfigError, TypeError):
    """A constructor argument the model does not take (a TypeError too, as Python's own for an
    unexpected keyword)."""


def map_aliases(arguments):
    """``arguments`` with bert_config names mapped to the constructor's (``hidden_dropout_prob``
    -> ``dropout_rate``, ...; ``CONFIG_ALIASES``)."""
    return {CONFIG_ALIASES.get(k, k): v for k, v in arguments.items()}


def config_arguments(cls, source, model=None):
    """The arguments of a config file (path) or dict ``source`` that ``cls`` takes, read by
    ``read_config``; the keys it does not use (besides ``METADATA_KEYS``) logged once as ignored."""
    where = None if isinstance(source, dict) else os.fspath(source)
    config = read_config(source if where is None else where)
    accepted = accepted_arguments(cls)
    ignored = sorted(k for k in config if k not in accepted and k not in METADATA_KEYS)
    if ignored:
        logger.warning(
            "config %s: ignoring key(s) %s that %s does not use", where or "<dict>", ignored, model or cls.__name__
        )
    return {k: v for k, v in config.items() if k in accepted}


def resolve_arguments(cls, arguments, config=None, model=None, also_accepted=()):
    """The constructor arguments of builder class ``cls``, as ``build_transformer_model`` and every
    ``Backbone`` (their constructors, ``from_preset``, a ``.keras`` file's config) take them: aliases
    mapped, unknown names refused (``UnknownArgumentError``), over the keys of ``config`` (a config
    file path or dict, or None) that ``cls`` takes, required names checked, values validated.

    Args:
        cls: the builder class (a ``Transformer`` subclass).
        arguments: keyword arguments; they win over ``config``.
        config: config file path, dict of its keys, or None.
        model: the name errors give (default ``cls.__name__``).
        also_accepted: names the caller takes besides the constructor's (listed in the error).
    Returns:
        a new dict of constructor arguments.
    """
    model = model or cls.__name__
    arguments = map_aliases(arguments)
    if isinstance(arguments.get("application"), str):
        arguments["application"] = arguments["application"].lower()
    accepted = accepted_arguments(cls)
    unknown = sorted(set(arguments) - accepted)
    if unknown:
        raise UnknownArgumentError(
            f"{model}: unknown argument(s) {unknown}; accepted: {sorted(accepted | set(also_accepted))}"
        )
    where = None if config is None or isinstance(config, dict) else os.fspath(config)
    resolved = {} if config is None else config_arguments(cls, config, model)
    resolved.update(arguments)
    missing = [k for k in cls.required_config_keys if k not in resolved]
    if missing:
        raise ConfigError(
            f"{model}: config {where!r} lacks {missing}"
            if where
            else f"{model}: missing required argument(s) {missing}"
        )
    return validate(resolved, where, model)


def _activation_error(value):
    """Why ``value`` is not a Keras activation, or None when it is one."""
    try:
        keras.activations.get(value)
    except (ValueError, TypeError) as e:
        return str(e)
    return None


def validate(config, where=None, model=None):
    """Checks the values of constructor arguments (ConfigError naming the key, the value
    and, when given, the ``model``)."""
    prefix = _where(where, model)
    for key, least in _INTEGERS.items():
        value = config.get(key)
        if value is None:
            continue
        if not _is_int(value) or value < least:
            raise ConfigError(f"{prefix}: {key} must be an integer >= {least}, got {value!r}")
    for key in _RATES:
        value = config.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1):
            raise ConfigError(f"{prefix}: {key} must be a number in [0, 1), got {value!r}")
    for key in _POSITIVE_FLOATS:
        value = config.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise ConfigError(f"{prefix}: {key} must be a positive number, got {value!r}")
    act = config.get("hidden_act")
    # a list: a gated feed-forward (T5.1.1's ["gelu", "linear"]), one activation per input projection
    acts = act if isinstance(act, (list, tuple)) and act else [act]
    reason = act is not None and next(filter(None, map(_activation_error, acts)), None)
    if reason:
        raise ConfigError(f"{prefix}: hidden_act={act!r} is not a Keras activation ({reason})")
    for key in _HEAD_OPTIONS:
        value = config.get(key)
        if not (
            value is None
            or isinstance(value, bool)
            or callable(value)
            or isinstance(value, str)
            and not _activation_error(value)
        ):
            raise ConfigError(
                f"{prefix}: {key} must be True, False or the name of a Keras activation of the "
                f"head ('softmax', 'linear', 'tanh', 'sigmoid', ...), got {value!r}"
            )
    normalization = config.get("normalization")
    if normalization is not None and normalization not in ATTENTION_NORMALIZATIONS:
        raise ConfigError(f"{prefix}: normalization must be one of {ATTENTION_NORMALIZATIONS}, got {normalization!r}")
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if heads and hidden and config.get("attention_head_size") is None and hidden % heads:
        raise ConfigError(
            f"{prefix}: hidden_size={hidden} is not divisible by "
            f"num_attention_heads={heads} (or give attention_head_size)"
        )
    return config
