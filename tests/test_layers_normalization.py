"""LayerNormalization and ScaleOffset against numpy."""
import keras
import numpy as np
import pytest

from gau_keras.layers import LayerNormalization, ScaleOffset
from tests import numpy_reference as ref
from tests.layer_utils import assert_keras_round_trip


def test_rms_norm_without_parameters(rng):
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    layer = LayerNormalization(zero_mean=False, scale=False, offset=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), ref.rms_norm(x.astype(float)), atol=1e-6)
    assert layer.weights == []
    assert layer.epsilon == pytest.approx(1e-7)


def test_full_layer_norm(rng):
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    layer = LayerNormalization(epsilon=1e-5)
    layer.build(x.shape)
    gamma, beta = rng.normal(size=8), rng.normal(size=8)
    layer.gamma.assign(gamma)
    layer.beta.assign(beta)
    centred = x - x.mean(-1, keepdims=True)
    expected = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), expected, atol=1e-5)


def test_scale_offset(rng):
    x = rng.normal(size=(2, 4)).astype("float32")
    layer = ScaleOffset()
    layer.build(x.shape)
    layer.gamma.assign(np.arange(4.0))
    layer.beta.assign(np.ones(4))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), x * np.arange(4.0) + 1, atol=1e-6)
    assert [w.name for w in ScaleOffset(offset=False, name="s").weights] == []


def test_round_trip_and_mask_propagation(rng):
    inputs = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(10, 6, mask_zero=True)(inputs)
    x = LayerNormalization(name="norm")(x)
    y = ScaleOffset(name="so")(x)
    assert y._keras_mask is not None
    model = keras.Model(inputs, y)
    assert_keras_round_trip(model, np.array([[1, 2, 0]]))
