"""Embedding (tied dense mode, bert4keras mask), SinusoidalPositionEmbedding,
PositionEmbedding and the relative position embeddings (their values against
bert4keras: tests/layers/test_parity.py)."""

import keras
import numpy as np
import pytest

from gau_keras.layers import (
    Embedding,
    PositionEmbedding,
    RelativePositionEmbedding,
    RelativePositionEmbeddingT5,
    SinusoidalPositionEmbedding,
)
from tests import numpy_reference as ref
from tests.harness import PADDING, floats, run_layer_test
from tests.layer_utils import assert_keras_round_trip

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


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
    expected = {
        "add": x + table,
        "mul": x * (1 + table),
        "zero": table[None],
        "concat": np.concatenate([x, np.broadcast_to(table, x.shape)], -1),
    }[merge_mode]
    layer = SinusoidalPositionEmbedding(6, merge_mode)
    got = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(got, expected, atol=2e-6)
    assert tuple(layer.compute_output_shape(x.shape)) == tuple(expected.shape)


def test_custom_position_ids(rng):
    x = rng.normal(size=(1, 3, 4)).astype("float32")
    positions = np.array([[2, 0, 700]])
    got = keras.ops.convert_to_numpy(SinusoidalPositionEmbedding(4, "zero", custom_position_ids=True)([x, positions]))
    np.testing.assert_allclose(got[0], ref.sinusoidal(701, 4)[[2, 0, 700]], atol=1e-4)


def test_position_embedding_in_a_model(rng):
    ids = keras.Input((None,), dtype="int32")
    x = Embedding(10, 4, mask_zero=True)(ids)
    layer = PositionEmbedding(6, 4, embeddings_initializer="normal", name="position")
    y = layer(x)
    zero = PositionEmbedding(6, 4, merge_mode="zero")(x)
    assert y._keras_mask is not None and getattr(zero, "_keras_mask", None) is None
    assert tuple(zero.shape) == (1, None, 4)
    model = keras.Model(ids, y)
    tokens = np.array([[1, 2, 3, 0]])
    table = keras.ops.convert_to_numpy(layer.embeddings)
    words = keras.ops.convert_to_numpy(model.layers[1](tokens))
    np.testing.assert_allclose(model.predict(tokens, verbose=0), words + table[None, :4], rtol=1e-6)
    assert_keras_round_trip(model, tokens)


def test_hierarchical_positions_reach_input_dim_squared(rng):
    x = np.zeros((1, 3, 2), "float32")
    layer = PositionEmbedding(4, 2, merge_mode="zero", hierarchical=0.5, custom_position_ids=True)
    layer.build([x.shape, (1, 3)])
    table = rng.normal(size=(4, 2)).astype("float32")
    layer.embeddings.assign(table)
    got = keras.ops.convert_to_numpy(layer([x, np.array([[0, 5, 15]])]))
    u = (table - 0.5 * table[0]) / 0.5
    np.testing.assert_allclose(got[0], [0.5 * u[p // 4] + 0.5 * u[p % 4] for p in (0, 5, 15)], rtol=1e-5)
    np.testing.assert_allclose(got[0, 0], table[0], rtol=1e-5)  # position 0 keeps its own row
    with pytest.raises(ValueError, match="merge_mode"):
        PositionEmbedding(4, 2, merge_mode="sum")


def test_relative_position_embeddings_clip_and_round_trip():
    q, v = keras.Input((None, 2)), keras.Input((None, 2))
    rel = RelativePositionEmbedding(5, 3, embeddings_initializer="normal")
    model = keras.Model([q, v], [rel([q, v]), RelativePositionEmbeddingT5(8, 2, max_distance=16)([q, v])])
    ids = keras.ops.convert_to_numpy(rel.compute_position_ids([np.zeros((1, 2, 1)), np.zeros((1, 6, 1))]))
    np.testing.assert_array_equal(ids, [[2, 3, 4, 4, 4, 4], [1, 2, 3, 4, 4, 4]])
    assert_keras_round_trip(model, [np.zeros((1, 3, 2), "float32"), np.zeros((1, 7, 2), "float32")])


def test_embedding_passes_the_layer_harness():
    ids = np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 10]], "int32")
    run_layer_test(
        Embedding,
        {"input_dim": 11, "output_dim": 8, "mask_zero": True},
        ids,
        (2, 5, 8),
        input_mask=PADDING,
        expected_output_mask=ids != 0,
    )


def test_position_embedding_passes_the_layer_harness():
    run_layer_test(
        PositionEmbedding, {"input_dim": 10, "output_dim": 8}, floats(2, 5, 8), (2, 5, 8), input_mask=PADDING
    )


def test_sinusoidal_position_embedding_passes_the_layer_harness():
    run_layer_test(SinusoidalPositionEmbedding, {"output_dim": 8}, floats(2, 5, 8), (2, 5, 8), input_mask=PADDING)


def test_relative_position_embedding_passes_the_layer_harness():
    run_layer_test(
        RelativePositionEmbedding,
        {"input_dim": 7, "output_dim": 4},
        [floats(2, 5, 8), floats(2, 5, 8)],
        (5, 5, 4),
        input_mask=[PADDING, PADDING],
        expected_output_mask=PADDING,
    )


def test_relative_position_embedding_t5_passes_the_layer_harness():
    run_layer_test(
        RelativePositionEmbeddingT5,
        {"input_dim": 8, "output_dim": 2},
        [floats(2, 5, 8), floats(2, 5, 8)],
        (5, 5, 2),
        input_mask=[PADDING, PADDING],
        expected_output_mask=PADDING,
    )
