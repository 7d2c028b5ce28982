"""Embedding (tied dense mode, bert4keras mask) and SinusoidalPositionEmbedding."""
import keras
import numpy as np
import pytest

from gau_keras.layers import Embedding, SinusoidalPositionEmbedding
from tests import numpy_reference as ref
from tests.layer_utils import assert_keras_round_trip


def test_embedding_mask_keeps_first_position():
    layer = Embedding(10, 4, mask_zero=True)
    mask = keras.ops.convert_to_numpy(layer.compute_mask(np.array([[0, 3, 0]])))
    np.testing.assert_array_equal(mask, [[True, True, False]])


def test_dense_mode_is_tied_transpose(rng):
    layer = Embedding(10, 4)
    layer.build((None, None))
    h = rng.normal(size=(2, 3, 4)).astype("float32")
    expected = h @ keras.ops.convert_to_numpy(layer.embeddings).T
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(h, mode="dense")), expected, atol=1e-5)
    with pytest.raises(ValueError, match="mode"):
        layer(h, mode="transpose")


def test_tied_model_round_trip():
    ids = keras.Input((None,), dtype="int32")
    embedding = Embedding(12, 4, mask_zero=True, name="Embedding-Token")
    x = embedding(ids)
    logits = embedding(x, mode="dense")
    model = keras.Model(ids, logits)
    assert logits.shape == (None, None, 12)
    assert len(model.weights) == 1
    assert_keras_round_trip(model, np.array([[3, 4, 0, 0]]))


@pytest.mark.parametrize("merge_mode", ["add", "mul", "zero", "concat"])
def test_sinusoidal_position_embedding_modes(rng, merge_mode):
    x = rng.normal(size=(2, 5, 6)).astype("float32")
    table = ref.sinusoidal(5, 6)
    expected = {"add": x + table, "mul": x * (1 + table), "zero": table[None],
                "concat": np.concatenate([x, np.broadcast_to(table, x.shape)], -1)}[merge_mode]
    layer = SinusoidalPositionEmbedding(6, merge_mode)
    got = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(got, expected, atol=2e-6)
    assert tuple(layer.compute_output_shape(x.shape)) == tuple(expected.shape)


def test_custom_position_ids(rng):
    x = rng.normal(size=(1, 3, 4)).astype("float32")
    positions = np.array([[2, 0, 700]])
    got = keras.ops.convert_to_numpy(SinusoidalPositionEmbedding(4, "zero", custom_position_ids=True)([x, positions]))
    np.testing.assert_allclose(got[0], ref.sinusoidal(701, 4)[[2, 0, 700]], atol=1e-4)


def test_sinusoidal_round_trip():
    inputs = keras.Input((None, 4))
    model = keras.Model(inputs, SinusoidalPositionEmbedding(4, "add")(inputs))
    assert_keras_round_trip(model, np.zeros((1, 3, 4), "float32"))

