"""Hugging Face model directories read as our models: config.json mapped to constructor
arguments and the state dict's names mapped to the TF1 names each builder's
``variable_mapping()`` reads, so the one checkpoint loader (``checkpointing``) loads them.

A directory counts as a Hugging Face one when it holds ``config.json`` with a ``model_type`` and
no TF1 checkpoint (its weights: ``hf_weights.WEIGHT_FILES``). ``read_hf_directory(directory)``
gives (model name, constructor arguments, checkpoint) where the checkpoint is an
``HFCheckpoint``: a ``{TF1 name: array}`` reader whose errors name the weights file. Read: BERT,
RoBERTa, ALBERT, ELECTRA, RoFormer, GPT2, T5 and mT5 (``HF_MODEL_TYPES``); written back
(``hf_export``): BERT, RoFormer and GPT2.

What differs from the TF1 checkpoints, and how it is met:
    - torch's ``nn.Linear`` keeps its weight [out, in]: transposed to the kernel [in, out]
      (GPT2's ``Conv1D`` is already [in, out]: kept);
    - GPT2's fused query/key/value ``c_attn`` [H, 3H] is split in three;
    - RoBERTa (``model_type: roberta``) numbers positions from ``pad_token_id + 1``: the rows
      before are dropped and ``max_position`` shrinks by as many;
    - GPT2's ``gelu_new`` (and ``gelu_pytorch_tanh``) is the tanh GELU, BERT's ``gelu`` the
      exact one (what the name 'gelu' means unless ``set_gelu('tanh')`` was called);
    - buffers (``position_ids``, RoFormer's sinusoidal table) and the MLM decoder, which is the
      tied token embedding, are not weights of ours and are left out;
    - T5: our decoder output is always scaled by d_model ** -0.5 (as bert4keras's), transformers'
      only where ``t5_scales_output``: otherwise the head kernel is read times sqrt(d_model).

Design notes: docs/models.md (Hugging Face checkpoints).
"""

import json
import os
import re
import shutil

import keras
import numpy as np

from gau_keras import activations, hf_weights
from gau_keras.errors import CheckpointError, ConfigError
from gau_keras.models.checkpointing import _DictReader
from gau_keras.models.config import read_json

#: our model name of each Hugging Face ``model_type`` we load
HF_MODEL_TYPES = {
    "bert": "bert",
    "roberta": "bert",
    "albert": "albert",
    "electra": "electra",
    "roformer": "roformer",
    "gpt2": "gpt2",
    "t5": "t5",
    "mt5": "mt5.1.1",
}
#: the tanh GELU as a config value: ``activations.gelu_tanh`` serialised (Keras's activation names
#: have no tanh GELU; the dict stays JSON in a Backbone's config and resolves with keras.activations.get)
GELU_TANH = keras.saving.serialize_keras_object(activations.gelu_tanh)
#: HF activation names -> ours
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": GELU_TANH,
    "gelu_pytorch_tanh": GELU_TANH,
    "gelu_fast": GELU_TANH,
    "relu": "relu",
    "tanh": "tanh",
    "swish": "swish",
    "silu": "swish",
}
#: BERT-family config.json keys -> constructor arguments
_BERT_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_hidden_layers",
    "num_attention_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position",
    "type_vocab_size": "segment_vocab_size",
    "hidden_dropout_prob": "dropout_rate",
    "attention_probs_dropout_prob": "attention_dropout_rate",
    "layer_norm_eps": "layer_norm_epsilon",
    "embedding_size": "embedding_size",
}
_GPT2_KEYS = {
    "vocab_size": "vocab_size",
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_inner": "intermediate_size",
    "n_positions": "max_position",
    "resid_pdrop": "dropout_rate",
    "attn_pdrop": "attention_dropout_rate",
    "layer_norm_epsilon": "layer_norm_epsilon",
}


def is_hf_directory(path):
    """Whether ``path`` is a Hugging Face model directory: config.json with a ``model_type``
    and no TF1 checkpoint (``*.index``) beside it; a missing weights file is then an error of
    ``hf_weights.weight_file`` naming the directory."""
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        return False
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config) or any(name.endswith(".index") for name in os.listdir(path)):
        return False
    return "model_type" in read_json(config)


def hf_model_name(config, where):
    """Our model name for a config.json's ``model_type``; a ConfigError naming it and the ones
    we load otherwise. A T5 with the gated feed-forward is our 't5.1.1'."""
    model_type = config.get("model_type")
    if model_type not in HF_MODEL_TYPES:
        raise ConfigError(
            f"config {where!r}: model_type {model_type!r} (architectures {config.get('architectures')}) is not "
            f"one gau_keras loads from Hugging Face files; it loads {sorted(HF_MODEL_TYPES)}"
        )
    if model_type == "t5" and config.get("feed_forward_proj", "relu").startswith("gated-"):
        return "t5.1.1"
    return HF_MODEL_TYPES[model_type]


def t5_scales_output(config):
    """Whether transformers scales a T5's decoder output by d_model ** -0.5 before the head (our
    T5, as bert4keras's, always does): ``scale_decoder_outputs`` where the config has it
    (transformers 5), else a tied head's T5 (transformers 4); transformers 5's mT5 never does."""
    if "scale_decoder_outputs" in config:
        return bool(config["scale_decoder_outputs"])
    version = re.match(r"\d+", str(config.get("transformers_version", "4")))
    major = int(version.group()) if version else 4
    if config.get("model_type") == "mt5" and major >= 5:
        return False
    return bool(config.get("tie_word_embeddings", True))


def _t5_config(config, where):
    """Our T5's arguments for a T5 / mT5 config.json (the relative position table's 32 buckets and
    distance 128 are fixed here; no position bias in the cross-attention, as transformers')."""
    fixed = {"relative_attention_num_buckets": 32, "relative_attention_max_distance": 128}
    for key, value in fixed.items():
        if config.get(key, value) != value:
            raise ConfigError(f"config {where!r}: {key}={config[key]!r} is not supported (only {value})")
    layers = config["num_layers"]
    if config.get("num_decoder_layers", layers) != layers:
        raise ConfigError(
            f"config {where!r}: num_decoder_layers={config['num_decoder_layers']} differs from "
            f"num_layers={layers}, which our T5 cannot build"
        )
    name = hf_model_name(config, where)
    projection = config.get("feed_forward_proj", "relu")
    if name == "t5" and not (t5_scales_output(config) and config.get("tie_word_embeddings", True)):
        raise ConfigError(
            f"config {where!r}: a T5 with a ReLU feed-forward and an untied or unscaled head is not supported"
        )
    act = projection.removeprefix("gated-")
    if projection.startswith("gated-") and act == "gelu":
        act = "gelu_new"  # transformers' gated-gelu is the tanh GELU
    if act not in HF_ACTIVATIONS:
        raise ConfigError(f"config {where!r}: feed_forward_proj={projection!r} is not supported")
    hidden_act = [HF_ACTIVATIONS[act], "linear"] if projection.startswith("gated-") else HF_ACTIVATIONS[act]
    return {
        "version": "t5.1.0" if name == "t5" else name,
        "vocab_size": config["vocab_size"],
        "hidden_size": config["d_model"],
        "num_hidden_layers": layers,
        "num_attention_heads": config["num_heads"],
        "intermediate_size": config["d_ff"],
        "attention_head_size": config.get("d_kv", config["d_model"] // config["num_heads"]),
        "hidden_act": hidden_act,
        "dropout_rate": config.get("dropout_rate", 0.1),
        "layer_norm_epsilon": config.get("layer_norm_epsilon", 1e-6),
        "cross_position_bias": False,
    }


def hf_config(config, where):
    """Constructor arguments of our model for a Hugging Face config.json's keys.

    Args:
        config: the config.json object.
        where: its path, for errors.
    Returns:
        a dict for ``build_transformer_model(config_path=...)`` (``resolve_arguments``).
    """
    model_type = config.get("model_type")
    hf_model_name(config, where)
    if model_type in ("t5", "mt5"):
        return _t5_config(config, where)
    keys = _GPT2_KEYS if model_type == "gpt2" else _BERT_KEYS
    arguments = {ours: config[theirs] for theirs, ours in keys.items() if config.get(theirs) is not None}
    act_key = "activation_function" if model_type == "gpt2" else "hidden_act"
    act = config.get(act_key, "gelu_new" if model_type == "gpt2" else "gelu")
    if act not in HF_ACTIVATIONS:
        raise ConfigError(f"config {where!r}: {act_key}={act!r} is not one of {sorted(HF_ACTIVATIONS)}")
    arguments["hidden_act"] = HF_ACTIVATIONS[act]
    if model_type == "gpt2":
        arguments.setdefault("intermediate_size", 4 * arguments["hidden_size"])
    if model_type in ("bert", "roberta") and config.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(
            f"config {where!r}: position_embedding_type={config['position_embedding_type']!r} is not "
            f"supported (only 'absolute')"
        )
    if model_type == "albert" and (config.get("num_hidden_groups", 1), config.get("inner_group_num", 1)) != (1, 1):
        raise ConfigError(
            f"config {where!r}: num_hidden_groups={config.get('num_hidden_groups')} and inner_group_num="
            f"{config.get('inner_group_num')} are not supported (ALBERT's one shared layer: 1 and 1)"
        )
    if model_type == "roformer" and config.get("rotary_value"):
        raise ConfigError(f"config {where!r}: rotary_value=true is not supported (RoPE on queries and keys only)")
    if model_type == "roberta":
        arguments["max_position"] -= _position_offset(config)
    if arguments.get("embedding_size") == arguments.get("hidden_size"):
        arguments.pop("embedding_size", None)
    return arguments


def _position_offset(config):
    """How many position rows RoBERTa's table has before position 0 (padding_idx + 1)."""
    return config.get("pad_token_id", 1) + 1 if config.get("model_type") == "roberta" else 0


# ------------------------------------------------------------------------------------ names
def _tf1_leaf(module, leaf, value):
    """(TF1 suffix, value) of one weight of a BERT-family module: a LayerNorm's gamma / beta, an
    embedding table itself, a Linear's kernel (transposed) and bias."""
    if module.rpartition(".")[2].startswith("LayerNorm"):
        return {"weight": "/gamma", "gamma": "/gamma", "bias": "/beta", "beta": "/beta"}[leaf], value
    if module.endswith("embeddings"):
        return "", value
    return ("/kernel", value.T) if leaf == "weight" else ("/bias", value)


_SKIPPED = re.compile(
    r"(^|\.)(position_ids|embed_positions\.weight)$|predictions\.decoder\.|^lm_head\.decoder\.|^sop_classifier\."
)
_HEAD_RENAMES = (
    ("cls.predictions.bias", "cls/predictions/output_bias"),
    ("lm_head.bias", "cls/predictions/output_bias"),
    ("predictions.bias", "cls/predictions/output_bias"),
    ("cls.seq_relationship.weight", "cls/seq_relationship/output_weights"),
    ("cls.seq_relationship.bias", "cls/seq_relationship/output_bias"),
)
#: (pattern, replacement) on a dotted HF name, in order, before the dots become slashes
_PATH_RENAMES = (
    (r"^(bert|roberta|roformer|electra|albert)\.", ""),
    (r"^lm_head\.dense\.", "cls.predictions.transform.dense."),
    (r"^lm_head\.layer_norm\.", "cls.predictions.transform.LayerNorm."),
    (r"^predictions\.(dense|LayerNorm)\.", r"cls.predictions.transform.\1."),
    (r"^embeddings_project\.", "encoder.embedding_hidden_mapping_in."),
    (r"^pooler\.(weight|bias)$", r"pooler.dense.\1"),
    (r"^discriminator_predictions\.dense_prediction\.", "discriminator_predictions.dense_1."),
    # ALBERT's one shared layer under its TF1 names (checkpoint.ALBERT_GROUP, ALBERT_BLOCK)
    (r"^encoder\.albert_layer_groups\.0\.albert_layers\.0\.", "encoder.transformer.group_0.inner_group_0."),
    (r"\.inner_group_0\.attention\.(query|key|value)\.", r".inner_group_0.attention_1.self.\1."),
    (r"\.inner_group_0\.attention\.dense\.", ".inner_group_0.attention_1.output.dense."),
    (r"\.inner_group_0\.attention\.LayerNorm\.", ".inner_group_0.LayerNorm."),
    (r"\.inner_group_0\.ffn\.", ".inner_group_0.ffn_1.intermediate.dense."),
    (r"\.inner_group_0\.ffn_output\.", ".inner_group_0.ffn_1.intermediate.output.dense."),
    (r"\.inner_group_0\.full_layer_layer_norm\.", ".inner_group_0.LayerNorm_1."),
    (r"\.layer\.(\d+)\.", r".layer_\1."),
)


def bert_family_names(state, config):
    """``{TF1 name: array}`` of a BERT / RoBERTa / ALBERT / ELECTRA / RoFormer state dict (the TF1
    names of ``checkpoint.bert_names``, ALBERT's shared group, ELECTRA's ``electra/`` scope), with
    the HF name of each for errors."""
    converted, sources = {}, {}
    scope = "electra/" if config.get("model_type") == "electra" else "bert/"
    for name, value in state.items():
        if _SKIPPED.search(name):
            continue
        renamed = dict(_HEAD_RENAMES).get(name)
        if renamed is None:
            path = name
            for pattern, replacement in _PATH_RENAMES:
                path = re.sub(pattern, replacement, path)
            if scope == "electra/":  # ELECTRA's TF1 projection keeps its own name
                path = path.replace("encoder.embedding_hidden_mapping_in.", "embeddings_project.")
            module, _, leaf = path.rpartition(".")
            suffix, value = _tf1_leaf(module, leaf, value)
            outer = "" if module.startswith(("cls.", "discriminator_predictions.")) else scope
            renamed = outer + module.replace(".", "/") + suffix
            if renamed == "bert/embeddings/position_embeddings":
                value = value[_position_offset(config) :]
        converted[renamed], sources[renamed] = value, name
    return converted, sources


#: GPT2's Hugging Face names -> ours: the tables outside the layers, then a layer's modules
GPT2_FIXED_NAMES = {"wte.weight": "gpt/embeddings/word_embeddings", "wpe.weight": "gpt/embeddings/position_embeddings"}
GPT2_LAYER_PARTS = {
    "ln_1": "attention/input/LayerNorm",
    "attn.c_proj": "attention/output/dense",
    "ln_2": "input/LayerNorm",
    "mlp.c_fc": "intermediate/dense",
    "mlp.c_proj": "output/dense",
}


def gpt2_names(state, config):
    """``{TF1 name: array}`` of a GPT2 state dict (our GPT2's ``gpt/`` names): Conv1D weights
    kept [in, out], the fused ``c_attn`` split into query, key and value."""
    converted, sources = {}, {}
    fixed, parts = GPT2_FIXED_NAMES, GPT2_LAYER_PARTS
    for name, value in state.items():
        path = re.sub(r"^transformer\.", "", name)
        if name.startswith("lm_head.") or path.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # the tied output matrix; the causal mask buffers of old versions
        if path in fixed:
            converted[fixed[path]], sources[fixed[path]] = value, name
            continue
        if path.startswith("ln_f."):
            leaf = "gamma" if path.endswith("weight") else "beta"
            converted[f"gpt/output/LayerNorm/{leaf}"], sources[f"gpt/output/LayerNorm/{leaf}"] = value, name
            continue
        match = re.match(r"h\.(\d+)\.(.+)\.(weight|bias)$", path)
        if match is None:
            converted[name], sources[name] = value, name  # unknown: reported as unused by the loader
            continue
        layer, module, leaf = match.groups()
        scope = f"gpt/transformer/layer_{layer}/"
        if module == "attn.c_attn":
            for part, chunk in zip(("query", "key", "value"), np.split(value, 3, axis=-1)):
                target = f"{scope}attention/self/{part}/{'kernel' if leaf == 'weight' else 'bias'}"
                converted[target], sources[target] = chunk, name
            continue
        if module not in parts:
            converted[name], sources[name] = value, name
            continue
        if module.startswith("ln_"):
            target = f"{scope}{parts[module]}/{'gamma' if leaf == 'weight' else 'beta'}"
        else:
            target = f"{scope}{parts[module]}/{'kernel' if leaf == 'weight' else 'bias'}"
        converted[target], sources[target] = value, name
    return converted, sources


def t5_names_of(state, config):
    """``{TF1 name: array}`` of a T5 / mT5 state dict (``t5.checkpoint.t5_names``): Linear weights
    transposed, the relative position tables [buckets, heads] to [heads, buckets], and for the
    gated versions the output kernel [H, V], multiplied by sqrt(d_model) where transformers does
    not scale the decoder output (our T5 always does)."""
    converted, sources = {}, {}
    version = hf_model_name(config, "config.json")
    norm = "rms_norm" if version == "mt5.1.1" else "layer_norm"
    final = "rms_norm" if version == "mt5.1.1" else "final_layer_norm"
    for name, value in state.items():
        if name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
            continue  # the shared table again; the head below
        if name == "shared.weight":
            target = "shared/embedding"
        elif re.match(r"(encoder|decoder)\.final_layer_norm\.weight$", name):
            target = f"{name.split('.')[0]}/{final}/scale"
        else:
            match = re.match(r"(encoder|decoder)\.block\.(\d+)\.layer\.(\d+)\.(.+)\.weight$", name)
            if match is None:
                converted[name], sources[name] = value, name  # unknown: reported as unused by the loader
                continue
            stack, block, layer, module = match.groups()
            scope = f"{stack}/block_{int(block):03d}/layer_{int(layer):03d}/"
            if module == "layer_norm":
                target = f"{scope}{norm}/scale"
            elif module.endswith("relative_attention_bias"):
                target, value = scope + module.replace(".", "/"), value.T
            elif module.startswith("DenseReluDense."):
                target, value = scope + module.replace(".", "/") + "/kernel", value.T
            else:  # SelfAttention.q / EncDecAttention.o ...: mesh TensorFlow's names have no /kernel
                target, value = scope + module.replace(".", "/"), value.T
        converted[target], sources[target] = value, name
    if version != "t5":
        head = state.get("lm_head.weight", state["shared.weight"])
        scale = 1.0 if t5_scales_output(config) else np.sqrt(config["d_model"])
        converted["decoder/logits/kernel"] = (head.T * scale).astype(head.dtype)
        sources["decoder/logits/kernel"] = "lm_head.weight" if "lm_head.weight" in state else "shared.weight"
    return converted, sources


class HFCheckpoint(_DictReader):
    """A Hugging Face state dict under our TF1 names, read by the checkpoint loader as a dict
    checkpoint; errors name the weights file and the Hugging Face name of a variable."""

    def __init__(self, values, sources, path):
        super().__init__(values)
        self.sources = sources
        self.path = f"{path} (Hugging Face weights)"


def hf_checkpoint(directory, config=None, use_torch=None):
    """The ``HFCheckpoint`` of a Hugging Face model directory (its config.json read unless given)."""
    directory = os.fspath(directory)
    config = config if config is not None else read_json(os.path.join(directory, "config.json"))
    where = os.path.join(directory, "config.json")
    hf_model_name(config, where)
    path = hf_weights.weight_file(directory)
    state = hf_weights.read_state_dict(path, use_torch=use_torch)
    names = {"gpt2": gpt2_names, "t5": t5_names_of, "mt5": t5_names_of}.get(config["model_type"], bert_family_names)
    values, sources = names(state, config)
    if not values:
        raise CheckpointError(f"{path!r} holds no tensors")
    return HFCheckpoint(values, sources, path)


def read_hf_directory(directory, use_torch=None):
    """(our model name, constructor arguments, ``HFCheckpoint``) of a Hugging Face model directory."""
    where = os.path.join(os.fspath(directory), "config.json")
    config = read_json(where)
    return hf_model_name(config, where), hf_config(config, where), hf_checkpoint(directory, config, use_torch)


# ---------------------------------------------------------------------------------- writing
def _tf1_values(transformer):
    """``{TF1 name: array}`` of a built builder object's mapped weights (what
    ``save_weights_as_checkpoint`` writes)."""
    values = {}
    transposed = transformer.transposed_variable_names()
    for _, weight, name in transformer._weight_pairs(transformer.variable_mapping()):
        value = keras.ops.convert_to_numpy(weight.value).astype(np.float32)
        values[name] = value.T if name in transposed else value
    return values


def _hf_bert_name(name, value, model_type):
    """(HF name, value) of one TF1 name of BERT's table (the inverse of ``bert_family_names``)."""
    for hf, tf1 in (pair for pair in _HEAD_RENAMES if pair[0].startswith("cls.")):
        if name == tf1:
            return hf, value
    scope, _, leaf = name.rpartition("/")
    if scope.startswith("bert/"):
        scope = model_type + "/" + scope[len("bert/") :]
    scope = scope.replace("/encoder/embedding_hidden_mapping_in", "/embeddings_project")
    path = re.sub(r"/layer_(\d+)/", r"/layer/\1/", scope).replace("/", ".")
    if leaf == "gamma":
        return path + ".weight", value
    if leaf == "beta":
        return path + ".bias", value
    if leaf == "kernel":
        return path + ".weight", value.T
    if leaf == "bias":
        return path + ".bias", value
    return f"{path}.{leaf}.weight", value  # an embedding table


def _hf_gpt2_state(values):
    """GPT2's state dict of our ``gpt/`` names (the inverse of ``gpt2_names``)."""
    state = {}
    fixed = {ours: theirs for theirs, ours in GPT2_FIXED_NAMES.items()}
    parts = {ours: theirs for theirs, ours in GPT2_LAYER_PARTS.items()}
    leaves = {"kernel": "weight", "gamma": "weight", "bias": "bias", "beta": "bias"}
    for name, value in values.items():
        if name in fixed:
            state["transformer." + fixed[name]] = value
        elif name.startswith("gpt/output/LayerNorm/"):
            state["transformer.ln_f." + leaves[name.rsplit("/", 1)[1]]] = value
        else:
            match = re.match(r"gpt/transformer/layer_(\d+)/(.+)/(\w+)$", name)
            if match and match.group(2) in parts:
                layer, module, leaf = match.groups()
                state[f"transformer.h.{layer}.{parts[module]}.{leaves[leaf]}"] = value
    for name in sorted(values):
        match = re.match(r"gpt/transformer/layer_(\d+)/attention/self/query/(kernel|bias)$", name)
        if match:
            layer, leaf = match.groups()
            fused = [values[name.replace("/query/", f"/{part}/")] for part in ("query", "key", "value")]
            state[f"transformer.h.{layer}.attn.c_attn.{leaves[leaf]}"] = np.concatenate(fused, axis=-1)
    return state


def _hf_activation(act, where):
    """A config.json activation name for our ``hidden_act``."""
    if act == "gelu":
        return "gelu" if activations.gelu_version() == "erf" else "gelu_new"
    if act == GELU_TANH or act is activations.gelu_tanh:
        return "gelu_new"
    if act in ("relu", "tanh", "swish"):
        return act
    raise ConfigError(f"{where}: hidden_act={act!r} has no Hugging Face name (gelu, gelu_new, relu, tanh, swish)")


#: our builder classes' names -> the HF model_type they are written as
_WRITTEN = {"BERT": "bert", "RoFormer": "roformer", "GPT2": "gpt2"}


def hf_export(model, directory, vocab_path=None):
    """Writes a model as a Hugging Face directory: config.json, model.safetensors and, given
    ``vocab_path``, vocab.txt (transformers' ``AutoModel.from_pretrained(directory)`` loads it).

    Args:
        model: a BERT, RoFormer or GPT2: a Backbone, ``build_transformer_model``'s model, or
            the builder object (``return_keras_model=False``).
        directory: the folder to write (made when absent).
        vocab_path: the vocab.txt to copy beside the weights, or None.
    Returns:
        the path of the model.safetensors written.
    """
    from safetensors.numpy import save_file

    transformer = getattr(model, "transformer", model)
    kind = type(transformer).__name__
    model_type = next((t for klass, t in _WRITTEN.items() if kind == klass or kind.startswith(klass + "_")), None)
    if model_type is None or not hasattr(transformer, "variable_mapping"):
        raise ConfigError(f"hf_export: a {kind} cannot be written as Hugging Face files; these can: {sorted(_WRITTEN)}")
    values = _tf1_values(transformer)
    hidden, epsilon = transformer.hidden_size, transformer.layer_norm_epsilon or transformer.block_norm_epsilon or 1e-7
    config = {
        "model_type": model_type,
        "vocab_size": transformer.vocab_size,
        "max_position_embeddings": transformer.max_position,
        "dropout": transformer.dropout_rate,
        "attention_dropout": transformer.attention_dropout_rate,
        "layer_norm_eps": epsilon,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "initializer_range": 0.02,
    }
    act = _hf_activation(transformer.hidden_act, f"hf_export ({kind})")
    if model_type == "gpt2":
        state = _hf_gpt2_state(values)
        config.update(
            architectures=["GPT2LMHeadModel"],
            n_embd=hidden,
            n_layer=transformer.num_hidden_layers,
            n_head=transformer.num_attention_heads,
            n_inner=transformer.intermediate_size,
            n_positions=transformer.max_position,
            activation_function=act,
            layer_norm_epsilon=epsilon,
            resid_pdrop=config.pop("dropout"),
            embd_pdrop=0.0,
            attn_pdrop=config.pop("attention_dropout"),
        )
        config.pop("layer_norm_eps")
    else:
        state = dict(_hf_bert_name(name, value, model_type) for name, value in values.items())
        prefix = model_type + ".embeddings."
        segments = state.get(prefix + "token_type_embeddings.weight")
        if segments is None:  # no segment input: one zero row leaves transformers' sum unchanged
            segments = state[prefix + "token_type_embeddings.weight"] = np.zeros((1, transformer.embedding_size))
        head = "cls.predictions.bias" in state
        config.update(
            architectures=[f"{'Bert' if model_type == 'bert' else 'RoFormer'}{'ForMaskedLM' if head else 'Model'}"],
            hidden_size=hidden,
            num_hidden_layers=transformer.num_hidden_layers,
            num_attention_heads=transformer.num_attention_heads,
            intermediate_size=transformer.intermediate_size,
            hidden_act=act,
            type_vocab_size=len(segments),
            hidden_dropout_prob=config.pop("dropout"),
            attention_probs_dropout_prob=config.pop("attention_dropout"),
        )
        if model_type == "roformer":
            config.update(embedding_size=transformer.embedding_size, rotary_value=False)
        if head:  # transformers names the MLM decoder's bias apart from the head's bias
            state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, "vocab.txt"))
    path = os.path.join(directory, hf_weights.SAFETENSORS)
    save_file({name: np.ascontiguousarray(value, np.float32) for name, value in state.items()}, path)
    return path
