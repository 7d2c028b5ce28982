"""GlobalPointer against a numpy implementation of its equations."""
import keras
import numpy as np
import pytest

from gau_keras.layers import GlobalPointer
from gau_keras.ops import NEG_INF
from tests.layer_utils import assert_keras_round_trip


def _rotate_pairs(x, positions):
    """RoPE by its definition: the pair (x[2i], x[2i+1]) at position p turns by p * 10000^(-2i/d)."""
    d = x.shape[-1]
    out = np.empty_like(x)
    for p in positions:
        for i in range(d // 2):
            theta = p * 10000.0 ** (-2.0 * i / d)
            a, b = x[:, p, ..., 2 * i], x[:, p, ..., 2 * i + 1]
            out[:, p, ..., 2 * i] = a * np.cos(theta) - b * np.sin(theta)
            out[:, p, ..., 2 * i + 1] = b * np.cos(theta) + a * np.sin(theta)
    return out


def _reference(layer, x, mask, rope, tril):
    kernel = keras.ops.convert_to_numpy(layer.dense.kernel).astype(float)
    bias = keras.ops.convert_to_numpy(layer.dense.bias).astype(float)
    batch, length, _ = x.shape
    z = (x.astype(float) @ kernel + bias).reshape(batch, length, layer.heads, 2 * layer.head_size)
    q, k = z[..., :layer.head_size], z[..., layer.head_size:]
    if rope:
        q, k = _rotate_pairs(q, range(length)), _rotate_pairs(k, range(length))
    scores = np.einsum("bmtd,bntd->btmn", q, k) / np.sqrt(layer.head_size)
    for b in range(batch):
        for m in range(length):
            for n in range(length):
                if not (mask[b, m] and mask[b, n]) or (tril and n < m):
                    scores[b, :, m, n] = NEG_INF
    return scores


@pytest.mark.parametrize("rope,tril", [(True, True), (False, True), (True, False)])
def test_matches_numpy(rng, rope, tril):
    x = rng.normal(size=(2, 5, 6)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    layer = GlobalPointer(3, 4, RoPE=rope, tril_mask=tril)
    got = keras.ops.convert_to_numpy(layer(x, mask=mask))
    assert got.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(got, _reference(layer, x, mask, rope, tril), rtol=1e-5, atol=1e-5)


def test_keras_mask_is_used_and_model_round_trips(rng):
    ids = np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(10, 6, mask_zero=True)(tokens)
    model = keras.Model(tokens, GlobalPointer(2, 4)(hidden))
    scores = model.predict(ids, verbose=0)
    assert np.all(scores[0, :, 3, :] == NEG_INF) and np.all(scores[1, :, :, 2:] == NEG_INF)
    assert np.all(scores[0, :, 1, 2] > NEG_INF)
    restored = assert_keras_round_trip(model, ids)
    assert restored.layers[-1].get_config()["head_size"] == 4


def test_odd_head_size_with_rope_is_an_error():
    with pytest.raises(ValueError, match="head_size"):
        GlobalPointer(2, 5)
