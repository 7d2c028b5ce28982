"""GlobalPointer against a numpy implementation of its equations."""

import keras
import numpy as np
import pytest

from gau_keras.layers import EfficientGlobalPointer, GlobalPointer
from gau_keras.ops import NEG_INF
from tests.harness import PADDING, floats, run_layer_test
from tests.layer_utils import assert_keras_round_trip

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


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
    q, k = z[..., : layer.head_size], z[..., layer.head_size :]
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


def test_bert4keras_arguments_and_old_configs():
    layer = GlobalPointer(2, 4)
    config = layer.get_config()
    assert (config["RoPE"], config["use_bias"], config["tril_mask"]) == (True, True, True)
    assert config["kernel_initializer"]["class_name"] == "LecunNormal"
    legacy = {k: v for k, v in config.items() if k not in ("RoPE", "use_bias")}
    legacy["rope"] = False  # the key .keras files of earlier versions carry
    assert GlobalPointer.from_config(legacy).RoPE is False
    unbiased = GlobalPointer(2, 4, use_bias=False)
    unbiased.build((None, None, 6))
    assert [w.shape for w in unbiased.weights] == [(6, 16)]


def test_efficient_global_pointer_in_a_model(rng):
    ids = np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(10, 6, mask_zero=True)(tokens)
    layer = EfficientGlobalPointer(3, 4, name="egp")
    model = keras.Model(tokens, layer(hidden))
    scores = model.predict(ids, verbose=0)
    assert scores.shape == (2, 3, 4, 4)
    assert np.all(scores[0, :, 3, :] == NEG_INF) and np.all(scores[1, :, 1, 0] == NEG_INF)
    assert [tuple(w.shape) for w in layer.weights] == [(6, 8), (8,), (8, 6), (6,)]
    # per-type biases: the types differ on the same span only through q_dense
    assert np.ptp(scores[0, :, 0, 2]) > 0
    assert_keras_round_trip(model, ids)


def test_mixed_precision_keeps_valid_spans_finite(rng):
    x = rng.normal(size=(2, 5, 6)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    for cls in (GlobalPointer, EfficientGlobalPointer):
        full = cls(2, 4)
        half = cls(2, 4, dtype="mixed_float16")
        full(x, mask=mask)
        half(x, mask=mask)
        half.set_weights(full.get_weights())
        expected, got = keras.ops.convert_to_numpy(full(x, mask=mask)), keras.ops.convert_to_numpy(half(x, mask=mask))
        valid = expected > NEG_INF
        assert got.dtype == np.float16 and np.all(np.isfinite(got[valid])) and np.all(got[~valid] < -6e4)
        np.testing.assert_allclose(got[valid], expected[valid], atol=2e-2, rtol=1e-2)


def test_global_pointer_passes_the_layer_harness():
    run_layer_test(
        GlobalPointer,
        {"heads": 2, "head_size": 4},
        floats(2, 5, 8),
        (2, 2, 5, 5),
        input_mask=PADDING,
        expected_output_mask=None,
    )


def test_efficient_global_pointer_passes_the_layer_harness():
    run_layer_test(
        EfficientGlobalPointer,
        {"heads": 2, "head_size": 4},
        floats(2, 5, 8),
        (2, 2, 5, 5),
        input_mask=PADDING,
        expected_output_mask=None,
    )
