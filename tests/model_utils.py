"""Tiny model configs and helpers shared by model/checkpoint tests."""

import json
import os

import numpy as np
import tensorflow as tf

from gau_keras import build_transformer_model

TINY_GAU = dict(
    vocab_size=60,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=1,
    intermediate_size=24,
    attention_key_size=8,
    hidden_act="swish",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=512,
    type_vocab_size=2,
)
TINY_ROFORMER = dict(
    vocab_size=60,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    hidden_act="relu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=512,
    type_vocab_size=2,
)
TINY_BERT = dict(
    vocab_size=60,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=64,
    type_vocab_size=2,
)
TINY = {
    "gau_alpha": TINY_GAU,
    "roformer_v2": TINY_ROFORMER,
    **{model: TINY_BERT for model in ("bert", "roberta", "nezha", "roformer", "albert_unshared")},
    "albert": {**TINY_BERT, "embedding_size": 8},
    "electra": {**TINY_BERT, "embedding_size": 8},
}


def write_config(directory, config):
    path = os.path.join(directory, "bert_config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return path


def random_checkpoint(directory, model="gau_alpha", seed=0, heads=None, **overrides):
    """Writes bert_config.json + a random TF1 checkpoint; returns (config, ckpt). ``heads``:
    build options whose weights the checkpoint holds too (a released BERT's pooler, NSP and MLM
    head: ``{"with_nsp": True, "with_mlm": True}``), not written into the config."""
    import keras

    keras.utils.set_random_seed(seed)
    os.makedirs(directory, exist_ok=True)
    config_path = write_config(directory, {**TINY[model], **overrides})
    transformer = build_transformer_model(config_path, model=model, return_keras_model=False, **(heads or {}))
    rng = np.random.default_rng(seed)
    for w in transformer.model.weights:  # break the symmetry of ones-initialised gammas
        w.assign(w.numpy() + rng.normal(size=w.shape) * 0.05)
    ckpt = transformer.save_weights_as_checkpoint(os.path.join(directory, "bert_model.ckpt"))
    return config_path, ckpt


def read_checkpoint(ckpt):
    reader = tf.train.load_checkpoint(ckpt)
    return {name: reader.get_tensor(name).astype(np.float64) for name in reader.get_variable_to_shape_map()}
