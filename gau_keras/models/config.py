"""The one reader of model configs (bert_config.json, the PyTorch port's
config.json, or the same keys inline in a pretraining config).

``read_config(source)`` returns constructor arguments: bert_config names are
mapped to the constructor's (``hidden_dropout_prob`` -> ``dropout_rate``, ...),
keys fixed by these models are checked (``use_bias`` must be false), and every
value the models use is validated, each error naming the key and the file.
``build_transformer_model`` and ``pretrain/`` both go through it, so a config
that builds a model also pretrains one.

Design notes: docs/models.md (The TF1 checkpoint).
"""
import json
import os

import keras

from gau_keras.ops import ATTENTION_NORMALIZATIONS

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
    "architectures", "model_type", "torch_dtype", "transformers_version", "initializer_range",
    "pad_token_id", "bos_token_id", "eos_token_id", "directionality", "pooler_fc_size",
    "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type",
    "gradient_checkpointing", "use_cache", "norm_type", "classifier_dropout",
}

#: HF-config keys that must hold these values for the models here.
REQUIRED_VALUES = {"use_bias": False, "attention_scale": True}

#: integer keys and their least value
_INTEGERS = {"vocab_size": 1, "hidden_size": 1, "num_hidden_layers": 1, "num_attention_heads": 1,
             "intermediate_size": 1, "attention_key_size": 1, "attention_head_size": 1,
             "embedding_size": 1, "segment_vocab_size": 0, "max_position": 1, "sequence_length": 1,
             "softmax_plus_min_len": 1, "proj_size": 1, "num_heads": 1, "memory_length": 0}
_RATES = ("dropout_rate", "attention_dropout_rate")
_POSITIVE_FLOATS = ("layer_norm_epsilon",)


class ConfigError(ValueError):
    """A model config value that cannot build a model; the message names key and file."""


def _where(where):
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
            raise ConfigError(f"{_where(where)}: {key}={source[key] if isinstance(source, dict) else not value!r} "
                              f"is not supported (these models require {key}={value!r})")
    for source_key, target in CONFIG_ALIASES.items():
        if source_key in config:
            value = config.pop(source_key)
            config.setdefault(target, value)
    validate(config, where)
    return config


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def validate(config, where=None):
    """Checks the values of constructor arguments (ConfigError naming the key)."""
    for key, least in _INTEGERS.items():
        value = config.get(key)
        if value is None:
            continue
        if not _is_int(value) or value < least:
            raise ConfigError(f"{_where(where)}: {key} must be an integer >= {least}, got {value!r}")
    for key in _RATES:
        value = config.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                  or not 0 <= value < 1):
            raise ConfigError(f"{_where(where)}: {key} must be a number in [0, 1), got {value!r}")
    for key in _POSITIVE_FLOATS:
        value = config.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise ConfigError(f"{_where(where)}: {key} must be a positive number, got {value!r}")
    act = config.get("hidden_act")
    if act is not None:
        try:
            keras.activations.get(act)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{_where(where)}: hidden_act={act!r} is not a Keras activation ({e})") from None
    normalization = config.get("normalization")
    if normalization is not None and normalization not in ATTENTION_NORMALIZATIONS:
        raise ConfigError(f"{_where(where)}: normalization must be one of {ATTENTION_NORMALIZATIONS}, "
                          f"got {normalization!r}")
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    if heads and hidden and config.get("attention_head_size") is None and hidden % heads:
        raise ConfigError(f"{_where(where)}: hidden_size={hidden} is not divisible by "
                          f"num_attention_heads={heads} (or give attention_head_size)")
    return config
