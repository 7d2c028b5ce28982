"""gau_keras.layers.heads and gau_keras.losses: output shapes, masking and losses (numpy references)."""

import tempfile

import keras
import numpy as np
import pytest

from gau_keras import build_transformer_model, losses
from gau_keras.layers import heads
from gau_keras.ops import NEG_INF
from tests.harness import PADDING, floats, ints, run_layer_test
from tests.layer_utils import assert_keras_round_trip
from tests.model_utils import TINY_GAU, write_config

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

IDS = np.array([[2, 7, 8, 9, 3], [2, 10, 3, 0, 0]], "int32")
SEGMENTS = np.zeros_like(IDS)


def _encoder(**kwargs):
    """A tiny GAU-alpha builder object without dropout (deterministic outputs)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(tmp, {**TINY_GAU, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
        return build_transformer_model(config, model="gau_alpha", return_keras_model=False, **kwargs)


def _log_softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=axis, keepdims=True))


def _sparse_ce(labels, logits):
    logp = _log_softmax(np.asarray(logits, float))
    return -np.mean(np.take_along_axis(logp, np.asarray(labels)[..., None], axis=-1))


def test_classification_head_reads_the_cls_vector():
    encoder = _encoder().model
    model = keras.Model(encoder.inputs, heads.classification_head(encoder.output, 4, dropout_rate=0.0))
    logits = model.predict([IDS, SEGMENTS], verbose=0)
    assert logits.shape == (2, 4)
    hidden = encoder.predict([IDS, SEGMENTS], verbose=0)
    dense = model.get_layer("classifier-dense")
    expected = hidden[:, 0] @ keras.ops.convert_to_numpy(dense.kernel) + keras.ops.convert_to_numpy(dense.bias)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    loss = losses.sparse_logits_crossentropy()(np.array([1, 3]), logits)
    np.testing.assert_allclose(float(loss), _sparse_ce([1, 3], logits), rtol=1e-5)
    assert_keras_round_trip(model, [IDS, SEGMENTS], atol=1e-5)


def test_span_head_masks_padding_and_its_loss_is_start_plus_end():
    encoder = _encoder().model
    model = keras.Model(encoder.inputs, heads.span_head(encoder.output, encoder.inputs[0]))
    logits = model.predict([IDS, SEGMENTS], verbose=0)
    assert logits.shape == (2, 2, 5)
    assert np.all(logits[1, :, 3:] == NEG_INF) and np.all(logits[0] > NEG_INF)
    targets = np.array([[1, 3], [1, 2]])
    loss = losses.sparse_logits_crossentropy()(targets, logits)
    np.testing.assert_allclose(float(loss), _sparse_ce(targets, logits), rtol=1e-5)


def test_multiple_choice_scores_each_choice_alone_and_masks_missing_ones():
    transformer = _encoder()
    model = heads.multiple_choice_model(transformer.model, dropout_rate=0.0)
    ids = np.zeros((2, 3, 5), "int32")
    ids[0, :2], ids[1, :3] = IDS, np.concatenate([IDS, IDS[:1]])  # example 0 has 2 choices
    logits = model.predict([ids, np.zeros_like(ids)], verbose=0)
    assert logits.shape == (2, 3)
    assert logits[0, 2] == NEG_INF and np.all(logits[1] > NEG_INF)
    # a choice's score does not depend on the other choices
    np.testing.assert_allclose(logits[0, :2], logits[1, :2], atol=1e-5)
    loss = losses.sparse_logits_crossentropy()(np.array([1, 2]), logits)
    np.testing.assert_allclose(float(loss), _sparse_ce([1, 2], logits), rtol=1e-5)
    assert_keras_round_trip(model, [ids, np.zeros_like(ids)], atol=1e-5)


def test_candidate_scores_are_mean_log_probabilities(rng):
    logits = rng.normal(size=(2, 3, 7)).astype("float32")  # [B, M, V]
    candidates = np.array([[[1, 2, 3], [4, 5, 0], [0, 0, 0]], [[6, 6, 6], [2, 0, 0], [3, 1, 4]]], "int32")  # [B, C, M]
    got = keras.ops.convert_to_numpy(heads.CandidateScores()([logits, candidates]))
    logp = _log_softmax(logits.astype(float))
    expected = np.full((2, 3), NEG_INF)
    for b in range(2):
        for c in range(3):
            used = [(m, t) for m, t in enumerate(candidates[b, c]) if t]
            if used:
                expected[b, c] = np.mean([logp[b, m, t] for m, t in used])
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_candidate_scoring_model_uses_the_mlm_head_at_the_masks():
    transformer = _encoder(with_mlm="linear")
    model = heads.candidate_scoring_model(transformer)
    positions = np.array([[1, 2], [1, 2]], "int32")
    candidates = np.array([[[7, 8], [9, 0]], [[10, 11], [0, 0]]], "int32")
    scores = model.predict([IDS, SEGMENTS, positions, candidates], verbose=0)
    mlm_logits = transformer.model.predict([IDS, SEGMENTS], verbose=0)
    logp = _log_softmax(mlm_logits.astype(float))
    np.testing.assert_allclose(scores[0, 0], (logp[0, 1, 7] + logp[0, 2, 8]) / 2, rtol=1e-4)
    np.testing.assert_allclose(scores[0, 1], logp[0, 1, 9], rtol=1e-4)
    assert scores[1, 1] == NEG_INF
    assert_keras_round_trip(model, [IDS, SEGMENTS, positions, candidates], atol=1e-5)
    with pytest.raises(ValueError, match="with_mlm"):
        heads.candidate_scoring_model(_encoder())


def test_global_pointer_head_and_loss(rng):
    encoder = _encoder().model
    model = keras.Model(encoder.inputs, heads.global_pointer_head(encoder.output, encoder.inputs[0], 3, 4))
    scores = model.predict([IDS, SEGMENTS], verbose=0)
    assert scores.shape == (2, 3, 5, 5)
    assert np.all(scores[1, :, 3:, :] == NEG_INF) and np.all(scores[:, :, 2, 1] == NEG_INF)
    labels = np.zeros(scores.shape, "int8")
    labels[0, 1, 1, 2] = labels[0, 1, 3, 3] = labels[1, 0, 1, 1] = 1
    got = float(losses.global_pointer_crossentropy(labels, scores))
    expected = []
    for row, target in zip(scores.reshape(6, -1).astype(float), labels.reshape(6, -1)):
        negatives, positives = row[target == 0], row[target == 1]
        expected.append(np.log1p(np.exp(negatives).sum()) + np.log1p(np.exp(-positives).sum()))
    np.testing.assert_allclose(got, np.mean(expected), rtol=1e-5)


def test_choice_logits_and_flatten_shapes():
    ids = np.arange(1, 25, dtype="int32").reshape(2, 3, 4)
    ids[1, 2] = 0
    flat = keras.ops.convert_to_numpy(heads.FlattenChoices()(ids))
    np.testing.assert_array_equal(flat, ids.reshape(6, 4))
    logits = keras.ops.convert_to_numpy(heads.ChoiceLogits()([np.arange(6.0)[:, None], ids]))
    np.testing.assert_array_equal(logits, np.array([[0, 1, 2], [3, 4, NEG_INF]], "float32"))


def test_first_token_passes_the_layer_harness():
    run_layer_test(heads.FirstToken, {}, floats(2, 5, 8), (2, 8), input_mask=PADDING, expected_output_mask=None)


def test_candidate_scores_passes_the_layer_harness():
    run_layer_test(
        heads.CandidateScores,
        {},
        [floats(2, 3, 7), ints(7, 2, 4, 3)],
        (2, 4),
        input_mask=[None, None],
        expected_output_mask=None,
    )


def test_choice_logits_passes_the_layer_harness():
    run_layer_test(heads.ChoiceLogits, {}, [floats(6, 1), ints(9, 2, 3, 5)], (2, 3))


def test_flatten_choices_passes_the_layer_harness():
    run_layer_test(heads.FlattenChoices, {}, ints(9, 2, 3, 5), (6, 5))


def test_gather_positions_passes_the_layer_harness():
    positions = np.array([[0, 2, 4], [1, 1, 3]], "int32")
    run_layer_test(
        heads.GatherPositions,
        {},
        [floats(2, 5, 8), positions],
        (2, 3, 8),
        input_mask=[PADDING, None],
        expected_output_mask=None,
    )


def test_span_logits_passes_the_layer_harness():
    run_layer_test(
        heads.SpanLogits,
        {},
        [floats(2, 5, 2), ints(9, 2, 5)],
        (2, 2, 5),
        input_mask=[PADDING, None],
        expected_output_mask=None,
    )
