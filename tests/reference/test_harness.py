"""Self-test of the original-bert4keras reference harness (tests/reference).

Writes tiny random checkpoints with bert4keras's own save_weights_as_checkpoint,
checks the variable names and shapes against docs/models.md (the TF1 checkpoint), and checks
that the forward pass on a padded batch is deterministic across processes.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.reference.harness import run_bert4keras

V, H, LAYERS, E_GAU, S_GAU, FFN, HEADS = 100, 32, 2, 64, 16, 64, 2

GAU_CONFIG = {
    "vocab_size": V,
    "hidden_size": H,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 1,
    "intermediate_size": E_GAU,
    "attention_key_size": S_GAU,
    "hidden_act": "swish",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 16,
    "type_vocab_size": 2,
}
ROFORMER_CONFIG = {
    "vocab_size": V,
    "hidden_size": H,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "intermediate_size": FFN,
    "hidden_act": "relu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 16,
    "type_vocab_size": 2,
}


def expected_gau_variables():
    names = {"bert/embeddings/word_embeddings": [V, H], "bert/embeddings/token_type_embeddings": [2, H]}
    for i in range(LAYERS):
        prefix = "GAU_alpha/encoder/layer_%d/gau/" % i
        names.update(
            {
                prefix + "i_dense/kernel": [H, 2 * E_GAU + S_GAU],
                prefix + "q_scaleoffset/gamma": [S_GAU],
                prefix + "k_scaleoffset/gamma": [S_GAU],
                prefix + "o_dense/kernel": [E_GAU, H],
            }
        )
    return names


def expected_roformer_variables():
    names = {"bert/embeddings/word_embeddings": [V, H], "bert/embeddings/token_type_embeddings": [2, H]}
    for i in range(LAYERS):
        prefix = "bert/encoder/layer_%d/" % i
        names.update({prefix + "attention/self/%s/kernel" % p: [H, H] for p in ("query", "key", "value")})
        names.update(
            {
                prefix + "attention/output/dense/kernel": [H, H],
                prefix + "intermediate/dense/kernel": [H, FFN],
                prefix + "output/dense/kernel": [FFN, H],
            }
        )
    return names


def padded_batch():
    """Right padding, left padding (token 0 at position 0 is padding too) and no padding."""
    token_ids = np.array([[2, 5, 7, 9, 11, 0, 0, 0], [0, 0, 0, 3, 4, 8, 1, 6], [4, 4, 8, 15, 16, 23, 42, 99]])
    segment_ids = np.array([[0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1]])
    return token_ids, segment_ids


@pytest.mark.parametrize(
    "model, config, expected",
    [
        ("gau_alpha", GAU_CONFIG, expected_gau_variables()),
        ("roformer_v2", ROFORMER_CONFIG, expected_roformer_variables()),
    ],
)
def test_random_checkpoint_names_and_deterministic_forward(tmp_path, model, config, expected):
    token_ids, segment_ids = padded_batch()
    ckpt = tmp_path / model / "bert_model.ckpt"
    written = run_bert4keras(
        config,
        model,
        init_random=True,
        save_checkpoint=ckpt,
        token_ids=token_ids,
        segment_ids=segment_ids,
        with_mlm=True,
    )

    assert written["variables"] == expected
    assert {name: shape for name, shape in tf.train.list_variables(str(ckpt))} == expected

    assert written["hidden"].shape == (3, 8, H)
    assert written["mlm_logits"].shape == written["mlm_output"].shape == (3, 8, V)
    assert np.isfinite(written["hidden"]).all()
    np.testing.assert_allclose(written["mlm_output"].sum(-1), 1.0, atol=1e-5)

    # A second process loading the checkpoint gives bit-identical outputs (the harness's loading
    # path is the same for both models: checked on one, a reference process less).
    if model != "gau_alpha":
        return
    loaded = run_bert4keras(config, model, checkpoint=ckpt, token_ids=token_ids, segment_ids=segment_ids, with_mlm=True)
    for key in ("hidden", "mlm_logits", "mlm_output"):
        np.testing.assert_array_equal(loaded[key], written[key], err_msg=key)


def test_missing_reference_package_skips_with_reason(tmp_path):
    (tmp_path / "tf_keras.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tf_keras'\", name='tf_keras')\n"
    )
    with pytest.raises(pytest.skip.Exception, match="missing package: tf_keras"):
        run_bert4keras(
            GAU_CONFIG, "gau_alpha", init_random=True, save_checkpoint=tmp_path / "ckpt", pythonpath=tmp_path
        )
