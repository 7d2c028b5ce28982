"""Add with Keras 2 mask semantics."""
import keras
import numpy as np

from gau_keras.layers import Add, Embedding


def test_add_keeps_mask_of_the_masked_input():
    ids = keras.Input((None,), dtype="int32")
    x = Embedding(10, 4, mask_zero=True)(ids)
    s = keras.layers.Embedding(2, 4)(ids)
    y = Add()([x, s])
    mask = keras.ops.convert_to_numpy(Add().compute_mask([x, s], [np.array([[True, False]]), None]))
    np.testing.assert_array_equal(mask, [[True, False]])
    assert y._keras_mask is not None
