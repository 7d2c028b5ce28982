"""FeedForward against numpy."""

import keras
import numpy as np
import pytest

from gau_keras.layers import FeedForward
from tests.harness import PADDING, floats, run_layer_test

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


def test_feedforward_relu_no_bias(rng):
    x = rng.normal(size=(2, 3, 6)).astype("float32")
    layer = FeedForward(10, activation="relu", use_bias=False)
    y = keras.ops.convert_to_numpy(layer(x))
    w1 = keras.ops.convert_to_numpy(layer.i0_dense.kernel)
    w2 = keras.ops.convert_to_numpy(layer.o_dense.kernel)
    np.testing.assert_allclose(y, np.maximum(x @ w1, 0) @ w2, atol=1e-5)
    assert len(layer.weights) == 2


def test_feedforward_glu(rng):
    x = rng.normal(size=(1, 2, 4)).astype("float32")
    layer = FeedForward(8, activation=["swish", "linear"])
    y = keras.ops.convert_to_numpy(layer(x))
    k = lambda d: keras.ops.convert_to_numpy(d.kernel)
    b = lambda d: keras.ops.convert_to_numpy(d.bias)
    h0 = x @ k(layer.i0_dense) + b(layer.i0_dense)
    h1 = x @ k(layer.i1_dense) + b(layer.i1_dense)
    expected = (h0 / (1 + np.exp(-h0)) * h1) @ k(layer.o_dense) + b(layer.o_dense)
    np.testing.assert_allclose(y, expected, atol=1e-5)


def test_feedforward_passes_the_layer_harness():
    run_layer_test(
        FeedForward, {"units": 12, "activation": ["swish", "linear"]}, floats(2, 5, 8), (2, 5, 8), input_mask=PADDING
    )
