"""recompute=True (bert4keras's RECOMPUTE): the same gradients, dropout included,
for GAU-alpha and RoFormerV2, eager and compiled (tf.function; jax.jit), on
either backend; the layers keep it through .keras round trips."""

import keras
import numpy as np
import pytest

from gau_keras import build_transformer_model
from gau_keras.layers import FeedForward, GatedAttentionUnit
from tests.model_utils import TINY

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


def _tensorflow_loss_and_gradients(model, ids, compiled):
    import tensorflow as tf

    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(model([ids, tf.zeros_like(ids)], training=True)))
        return loss, [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]

    return (tf.function(step) if compiled else step)(tf.constant(ids))


def _jax_loss_and_gradients(model, ids, compiled):
    import jax

    def loss(trainable, non_trainable, ids):
        y, _ = model.stateless_call(trainable, non_trainable, [ids, keras.ops.zeros_like(ids)], training=True)
        return keras.ops.sum(keras.ops.square(y))

    step = jax.value_and_grad(loss)
    return (jax.jit(step) if compiled else step)(
        [v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables], ids
    )


def _gradients(model_name, recompute, dropout, compiled, seed=7):
    keras.utils.set_random_seed(0)
    config = dict(TINY[model_name], hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    model = build_transformer_model(model=model_name, with_mlm="linear", recompute=recompute, **config)
    ids = np.random.default_rng(0).integers(1, 60, size=(3, 17)).astype("int32")
    ids[2, 11:] = 0
    keras.utils.set_random_seed(seed)  # the dropout masks of this step
    step = _jax_loss_and_gradients if keras.backend.backend() == "jax" else _tensorflow_loss_and_gradients
    loss, grads = step(model, ids, compiled)
    return model, loss, [keras.ops.convert_to_numpy(g) for g in grads]


def _cases():
    """(model, dropout, compiled) triples; on JAX, eager runs op by op (8-10 s per model on a 2-core
    CPU), so it runs eager only with dropout, the case where the recomputation must replay masks."""
    jax = keras.backend.backend() == "jax"
    return [
        pytest.param(model, dropout, graph, id=f"{model}-{dropout}-{'compiled' if graph else 'eager'}")
        for model in ["gau_alpha", "roformer_v2"]
        for dropout in [0.0, 0.1]
        for graph in [False, True]
        if graph or dropout or not jax
    ]


@pytest.mark.parametrize("model_name, dropout, graph", _cases())
def test_gradients_identical(model_name, dropout, graph):
    plain, plain_loss, expected = _gradients(model_name, False, dropout, graph)
    model, loss, got = _gradients(model_name, True, dropout, graph)
    assert float(loss) == pytest.approx(float(plain_loss), rel=1e-6)
    # round-off of sums reordered by the recomputation: a few float32 eps of the largest entry
    # (entries reach ~150); replaying other dropout masks would change them by O(1)
    for g, e, v in zip(got, expected, model.trainable_variables):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(e).max()), err_msg=v.path)
    layers = [layer for layer in model.layers if isinstance(layer, (GatedAttentionUnit, FeedForward))]
    assert layers and all(layer.recompute for layer in layers)


def test_environment_switch_and_serialisation(monkeypatch, tmp_path):
    monkeypatch.setenv("RECOMPUTE", "1")
    model = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    layer = model.get_layer("Transformer-0-GatedAttentionUnit")
    assert layer.recompute
    model.save(tmp_path / "m.keras")
    assert keras.saving.load_model(tmp_path / "m.keras").get_layer(layer.name).recompute
    monkeypatch.setenv("RECOMPUTE", "0")
    assert not build_transformer_model(model="gau_alpha", **TINY["gau_alpha"]).get_layer(layer.name).recompute
