"""LayerNormalization and ScaleOffset against numpy."""

import keras
import numpy as np
import pytest

from gau_keras.layers import LayerNormalization, ScaleOffset
from tests import numpy_reference as ref
from tests.harness import PADDING, floats, run_layer_test
from tests.layer_utils import assert_keras_round_trip

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


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
    expected = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), expected, atol=1e-5)


def test_scale_offset(rng):
    x = rng.normal(size=(2, 4)).astype("float32")
    layer = ScaleOffset()
    layer.build(x.shape)
    layer.gamma.assign(np.arange(4.0))
    layer.beta.assign(np.ones(4))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), x * np.arange(4.0) + 1, atol=1e-6)
    assert [w.name for w in ScaleOffset(offset=False, name="s").weights] == []


def test_conditional_layer_norm_model_keeps_the_mask_and_round_trips(rng):
    ids = keras.Input((None,), dtype="int32")
    cond = keras.Input((3,))
    x = keras.layers.Embedding(10, 6, mask_zero=True)(ids)
    layer = LayerNormalization(conditional=True, hidden_units=4, hidden_activation="tanh", name="cln")
    y = layer([x, cond])
    assert y._keras_mask is not None and tuple(y.shape) == (None, None, 6)
    assert sorted(w.path.split("/")[-2] for w in layer.weights if "dense" in w.path) == [
        "beta_dense",
        "gamma_dense",
        "hidden_dense",
    ]
    model = keras.Model([ids, cond], y)
    inputs = [np.array([[1, 2, 0]]), rng.normal(size=(1, 3)).astype("float32")]
    before = model.predict(inputs, verbose=0)
    # zero-initialised condition projections: it starts as the plain layer norm
    plain = LayerNormalization()(keras.ops.convert_to_numpy(model.layers[1](inputs[0])))
    np.testing.assert_allclose(before, keras.ops.convert_to_numpy(plain), atol=1e-5)
    for w in (layer.gamma_dense.kernel, layer.beta_dense.kernel):
        w.assign(rng.normal(size=w.shape))
    restored = assert_keras_round_trip(model, inputs)
    assert restored.get_layer("cln").get_config()["hidden_units"] == 4
    assert np.abs(model.predict(inputs, verbose=0) - before).max() > 1e-2


def test_constant_scale_and_offset_and_errors(rng):
    x = rng.normal(size=(2, 4)).astype("float32")
    layer = ScaleOffset(scale=2.0, offset=None)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), 2 * x, rtol=1e-6)
    assert layer.weights == []
    with pytest.raises(ValueError, match=r"\[x, cond\]"):
        LayerNormalization(conditional=True)(x)


def test_conditional_layer_norm_mixed_precision(rng):
    x, cond = rng.normal(size=(2, 3, 8)).astype("float32") * 300, rng.normal(size=(2, 5)).astype("float32")
    full, half = LayerNormalization(conditional=True), LayerNormalization(conditional=True, dtype="mixed_float16")
    full([x, cond])
    half([x, cond])
    weights = [rng.normal(size=w.shape).astype("float32") for w in full.get_weights()]
    full.set_weights(weights)
    half.set_weights(weights)
    got = keras.ops.convert_to_numpy(half([x, cond]))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(full([x, cond])), atol=5e-2, rtol=1e-2)


def test_scale_offset_passes_the_layer_harness():
    run_layer_test(ScaleOffset, {}, floats(2, 5, 8), (2, 5, 8), input_mask=PADDING)


def test_layer_normalization_passes_the_layer_harness():
    run_layer_test(LayerNormalization, {}, floats(2, 5, 8), (2, 5, 8), input_mask=PADDING)
