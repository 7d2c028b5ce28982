"""benchmarks/gau_plain_jax.py, the yardstick of issue 34: the same maths as our GAU-α."""

import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.jax_only
def test_plain_jax_gau_equals_our_gau_alpha_and_trains():
    import jax.numpy as jnp

    from gau_keras import build_transformer_model

    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
    import gau_plain_jax

    config = dict(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=1,
        intermediate_size=32,
        attention_key_size=8,
        hidden_act="swish",
        max_position_embeddings=64,
        type_vocab_size=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = build_transformer_model(config, model="gau_alpha")
    rng = np.random.default_rng(0)
    for w in model.weights:  # off their initial values (gammas start at 1)
        w.assign(np.asarray(w.value) + rng.normal(0, 0.05, w.shape).astype("float32"))
    params = gau_plain_jax.params_from_model(model, 2)
    for length in (6, 30):  # below and above softmax_plus's minimum length 16
        ids = rng.integers(1, 40, (3, length)).astype("int32")
        segments = rng.integers(0, 2, (3, length)).astype("int32")
        ours = np.asarray(model([ids, segments]))
        plain = np.asarray(gau_plain_jax.forward(params, jnp.asarray(ids), jnp.asarray(segments)))
        np.testing.assert_allclose(plain, ours, rtol=1e-5, atol=1e-5)
        half = np.asarray(gau_plain_jax.forward(params, jnp.asarray(ids), jnp.asarray(segments), "bfloat16"))
        assert np.abs(half - ours).max() < 0.05
    run, _, _ = gau_plain_jax.train_step(params, 2, 8, "float32")
    losses = [float(run()) for _ in range(30)]
    assert losses[-1] < losses[0]
