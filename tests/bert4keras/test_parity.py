"""gau_keras vs the ORIGINAL bert4keras (0.11.5, run in a subprocess by tests/reference).

Both directions of checkpoint compatibility, with tiny random weights:
  * bert4keras writes an original-format checkpoint (its own save_weights_as_checkpoint);
    our build_transformer_model loads it and must give bert4keras's outputs;
  * our save_weights_as_checkpoint writes a checkpoint of our (perturbed) random
    weights; bert4keras loads it and must give our outputs.
The batch has right and left padding, a sequence with fewer than 16 real tokens
(softmax_plus's floor matters) and 520-token rows (> 512 and > max_position_embeddings).
"""

import numpy as np
import pytest
import tensorflow as tf

from gau_keras import build_transformer_model
from tests.model_utils import write_config
from tests.reference.harness import run_bert4keras

pytestmark = pytest.mark.slow

HIDDEN_ATOL, LOGITS_ATOL, PROBS_ATOL = 1e-5, 1e-4, 1e-5
APPLICATIONS = ("encoder", "lm", "unilm")

CONFIGS = {
    "gau_alpha": {
        "vocab_size": 100,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 1,
        "intermediate_size": 64,
        "attention_key_size": 16,
        "hidden_act": "swish",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 16,
        "type_vocab_size": 2,
    },
    "roformer_v2": {
        "vocab_size": 100,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "hidden_act": "relu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 16,
        "type_vocab_size": 2,
    },
}


def batch(length=520, seed=0):
    """token_ids, segment_ids [4, length]: short right-padded (5 real tokens), left-padded
    (300 real), full, right-padded two-segment (40 real)."""
    rng = np.random.default_rng(seed)
    token_ids = np.zeros((4, length), np.int32)
    segment_ids = np.zeros((4, length), np.int32)
    token_ids[0, :5] = rng.integers(1, 100, 5)
    token_ids[1, -300:] = rng.integers(1, 100, 300)
    segment_ids[1, -100:] = 1
    token_ids[2] = rng.integers(1, 100, length)
    segment_ids[2, 200:] = 1
    token_ids[3, :40] = rng.integers(1, 100, 40)
    segment_ids[3, 20:40] = 1
    return token_ids, segment_ids


def last_hidden_layer(model, num_layers):
    block = "GatedAttentionUnit" if model == "gau_alpha" else "FeedForward"
    return f"Transformer-{num_layers - 1}-{block}-Norm"


def our_outputs(transformer, model, token_ids, segment_ids):
    """{'hidden', 'mlm_logits', 'mlm_output'} of a gau_keras builder with the MLM head."""
    import keras

    net = transformer.model
    head = net.get_layer("Output-MLM-Activation")
    probe = keras.Model(
        net.inputs,
        [net.get_layer(last_hidden_layer(model, transformer.num_hidden_layers)).output, head.input, head.output],
    )
    values = probe([token_ids, segment_ids], training=False)
    return dict(zip(("hidden", "mlm_logits", "mlm_output"), (keras.ops.convert_to_numpy(v) for v in values)))


def assert_parity(ours, reference, label):
    diffs = {key: float(np.abs(ours[key] - reference[key]).max()) for key in ("hidden", "mlm_logits", "mlm_output")}
    print(f"{label}: max|diff| " + ", ".join(f"{k}={v:.2e}" for k, v in diffs.items()))
    assert np.isfinite(reference["hidden"]).all(), f"{label}: the reference produced non-finite values"
    np.testing.assert_allclose(ours["hidden"], reference["hidden"], rtol=0, atol=HIDDEN_ATOL, err_msg=label)
    np.testing.assert_allclose(ours["mlm_logits"], reference["mlm_logits"], rtol=0, atol=LOGITS_ATOL, err_msg=label)
    np.testing.assert_allclose(ours["mlm_output"], reference["mlm_output"], rtol=0, atol=PROBS_ATOL, err_msg=label)


@pytest.fixture(scope="module")
def bert4keras_checkpoints(tmp_path_factory):
    """model -> (config_path, checkpoint written by bert4keras, {application: outputs})."""
    cache = {}

    def get(model):
        if model not in cache:
            directory = tmp_path_factory.mktemp(f"b4k_{model}")
            config_path = write_config(str(directory), CONFIGS[model])
            ckpt = directory / "bert4keras" / "bert_model.ckpt"
            token_ids, segment_ids = batch()
            outputs = run_bert4keras(
                config_path,
                model,
                init_random=True,
                save_checkpoint=ckpt,
                token_ids=token_ids,
                segment_ids=segment_ids,
                with_mlm=True,
                application=list(APPLICATIONS),
            )
            cache[model] = config_path, str(ckpt), outputs
        return cache[model]

    return get


@pytest.mark.parametrize(
    "model, application",
    [
        ("gau_alpha", "encoder"),
        pytest.param("gau_alpha", "lm"),
        pytest.param("gau_alpha", "unilm"),
        ("roformer_v2", "encoder"),
        ("roformer_v2", "lm"),
        ("roformer_v2", "unilm"),
    ],
)
def test_loads_bert4keras_checkpoint_and_matches_outputs(bert4keras_checkpoints, model, application):
    config_path, ckpt, reference = bert4keras_checkpoints(model)
    transformer = build_transformer_model(
        config_path, ckpt, model=model, application=application, with_mlm=True, return_keras_model=False
    )
    token_ids, segment_ids = batch()
    assert_parity(
        our_outputs(transformer, model, token_ids, segment_ids),
        reference[application],
        f"{model}/{application} (bert4keras checkpoint)",
    )


@pytest.mark.parametrize("model, min_len", [("gau_alpha", 1), ("roformer_v2", None)])
def test_bert4keras_loads_our_checkpoint_and_matches_outputs(tmp_path, bert4keras_checkpoints, model, min_len):
    """Our random weights, perturbed so that no two weights coincide (q/k gammas start as
    ones), saved by us, loaded by bert4keras. GAU-alpha runs with softmax_plus's floor at 1
    (the April-2022 bert4keras) on both sides; every row has >= 2 real tokens, so no row
    has n = 1, where the two bert4keras versions themselves disagree."""
    config_path, _, _ = bert4keras_checkpoints(model)
    overrides = {} if min_len is None else {"softmax_plus_min_len": min_len}
    transformer = build_transformer_model(
        config_path, model=model, with_mlm=True, return_keras_model=False, **overrides
    )
    rng = np.random.default_rng(7)
    for weight in transformer.model.weights:
        weight.assign(weight.numpy() + rng.normal(scale=0.05, size=weight.shape).astype(weight.dtype))
    ckpt = transformer.save_weights_as_checkpoint(str(tmp_path / "ours" / "bert_model.ckpt"))
    token_ids, segment_ids = batch()
    reference = run_bert4keras(
        config_path,
        model,
        checkpoint=ckpt,
        token_ids=token_ids,
        segment_ids=segment_ids,
        with_mlm=True,
        softmax_plus_min_len=min_len,
    )
    assert_parity(
        our_outputs(transformer, model, token_ids, segment_ids),
        reference,
        f"{model} (our checkpoint, softmax_plus_min_len={min_len or 16})",
    )


@pytest.mark.parametrize("model", sorted(CONFIGS))
def test_our_checkpoint_has_bert4keras_names_and_shapes(tmp_path, bert4keras_checkpoints, model):
    config_path, b4k_ckpt, _ = bert4keras_checkpoints(model)
    transformer = build_transformer_model(config_path, b4k_ckpt, model=model, with_mlm=True, return_keras_model=False)
    ours = transformer.save_weights_as_checkpoint(str(tmp_path / "bert_model.ckpt"))
    assert dict(tf.train.list_variables(ours)) == dict(tf.train.list_variables(b4k_ckpt))
    ours_reader, b4k_reader = tf.train.load_checkpoint(ours), tf.train.load_checkpoint(b4k_ckpt)
    for name in b4k_reader.get_variable_to_shape_map():
        np.testing.assert_array_equal(ours_reader.get_tensor(name), b4k_reader.get_tensor(name), err_msg=name)
