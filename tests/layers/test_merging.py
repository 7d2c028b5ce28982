"""Add with Keras 2 mask semantics, Concatenate1D and the masked GlobalMaxPooling1D."""

import keras
import numpy as np
import pytest

from gau_keras.layers import Add, Concatenate1D, Embedding, GlobalMaxPooling1D
from tests.harness import PADDING, floats, run_layer_test
from tests.layer_utils import assert_keras_round_trip

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


def test_add_keeps_mask_of_the_masked_input():
    ids = keras.Input((None,), dtype="int32")
    x = Embedding(10, 4, mask_zero=True)(ids)
    s = keras.layers.Embedding(2, 4)(ids)
    y = Add()([x, s])
    mask = keras.ops.convert_to_numpy(Add().compute_mask([x, s], [np.array([[True, False]]), None]))
    np.testing.assert_array_equal(mask, [[True, False]])
    assert y._keras_mask is not None


def test_concatenate1d_mixes_masked_and_unmasked_sequences():
    ids = keras.Input((None,), dtype="int32")
    prefix = keras.Input((2, 4))
    x = Embedding(10, 4, mask_zero=True)(ids)
    y = Concatenate1D()([prefix, x])
    assert tuple(y.shape) == (None, None, 4) and y._keras_mask is not None
    pooled = GlobalMaxPooling1D()(y)
    model = keras.Model([prefix, ids], [y, pooled])
    tokens, front = np.array([[3, 4, 0]]), np.full((1, 2, 4), -5.0, "float32")
    sequence, maximum = model.predict([front, tokens], verbose=0)
    words = keras.ops.convert_to_numpy(model.get_layer(index=2)(tokens))
    np.testing.assert_allclose(sequence, np.concatenate([front, words], axis=1), rtol=1e-6)
    # the padded word (its embedding still there) does not take part in the max
    np.testing.assert_allclose(maximum[0], np.max(sequence[0, :4], axis=0), rtol=1e-6)
    mask = Concatenate1D().compute_mask([front, words], [None, np.array([[True, True, False]])])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(mask), [[True, True, True, True, False]])
    assert Concatenate1D().compute_output_shape([(None, 2, 4), (None, 3, 4)]) == (None, 5, 4)
    assert_keras_round_trip(model, [front, tokens])
    x = np.array([[[1.0, -2.0], [9.0, 9.0], [-1.0, -3.0]]], "float32")
    got = GlobalMaxPooling1D()(x, mask=np.array([[True, False, True]]))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), [[1.0, -2.0]])


def test_add_passes_the_layer_harness():
    run_layer_test(
        Add,
        {},
        [floats(2, 5, 8), floats(2, 5, 8, seed=1)],
        (2, 5, 8),
        input_mask=[PADDING, None],
        expected_output_mask=PADDING,
    )


def test_concatenate1d_passes_the_layer_harness():
    run_layer_test(
        Concatenate1D,
        {},
        [floats(2, 5, 8), floats(2, 3, 8, seed=1)],
        (2, 8, 8),
        input_mask=[PADDING, None],
        expected_output_mask=np.concatenate([PADDING, np.ones((2, 3), bool)], 1),
    )
