"""ConditionalRandomField and MaximumEntropyMarkovModel in use: compiled with
their own loss and accuracy, trained, saved; the CRF loss against a brute-force
enumeration of label paths; masks, lr_multiplier and mixed precision.
(Equality with bert4keras: tests/layers/test_parity.py.)"""

import itertools

import keras
import numpy as np
import pytest

from gau_keras.layers import ConditionalRandomField, Embedding, MaximumEntropyMarkovModel
from tests.harness import PADDING, floats, run_layer_test
from tests.layer_utils import assert_keras_round_trip

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _tagger(layer):
    """A tagger in the bert4keras face's Model, whose JAX steps map the transitions the MEMM
    accuracy reads (a plain keras.Model: test_face.py)."""
    from gau_keras.backend.keras.models import Model

    ids = keras.Input((None,), dtype="int32")
    scores = keras.layers.Dense(3)(Embedding(12, 8, mask_zero=True)(ids))
    return Model(ids, layer(scores))


def _tagging_data(rng):
    ids = rng.integers(1, 12, size=(32, 6))
    ids[::2, 4:] = 0
    return ids, (ids % 3) * (ids > 0)


@pytest.mark.parametrize("cls", [ConditionalRandomField, MaximumEntropyMarkovModel])
def test_trains_with_its_loss_and_accuracy_and_round_trips(rng, cls):
    layer = cls(lr_multiplier=4)
    model = _tagger(layer)
    model.compile(optimizer=keras.optimizers.Adam(0.03), loss=layer.sparse_loss, metrics=[layer.sparse_accuracy])
    ids, labels = _tagging_data(rng)
    history = model.fit(ids, labels, epochs=3, batch_size=8, verbose=0).history
    # 0.7: JAX measured 0.55 for MEMM (TensorFlow below 0.5): TensorFlow hands the embedding's gradient to
    # Adam as IndexedSlices, which gives another trajectory than the dense gradient JAX has
    assert history["loss"][-1] < 0.7 * history["loss"][0]
    assert history["sparse_accuracy"][-1] > history["sparse_accuracy"][0]
    scores = model.predict(ids[:2], verbose=0)
    assert np.all(scores[0, 4:] == -np.inf) and np.all(np.isfinite(scores[0, :4])) and np.all(np.isfinite(scores[1]))
    # bound-method losses do not serialise (neither in Keras 2): round-trip the uncompiled architecture
    restored = assert_keras_round_trip(keras.Model(model.inputs, model.outputs), ids[:4])
    assert restored.layers[-1].get_config()["lr_multiplier"] == 4


def _memm_accuracy(scores, labels, trans):
    """bert4keras's MEMM accuracy in numpy: each token's argmax of (its score + the transition
    from the previous token's true label) / 2 (the first token: its score), left to right and
    right to left (transposed transitions), averaged; padded positions (score -inf) left out."""
    hits = {False: [], True: []}
    for row_scores, row_labels in zip(scores, labels):
        n = int(np.isfinite(row_scores[:, 0]).sum())
        for backwards in (False, True):
            s, y = row_scores[:n], row_labels[:n]
            t = trans.T if backwards else trans
            if backwards:
                s, y = s[::-1], y[::-1]
            mixed = np.concatenate([s[:1], (s[1:] + t[y[:-1]]) / 2])
            hits[backwards].extend(mixed.argmax(-1) == y)
    return (np.mean(hits[False]) + np.mean(hits[True])) / 2


@pytest.mark.parametrize("hidden_dim", [None, 2])
def test_memm_accuracy_in_evaluate_is_computed_from_its_transitions(rng, hidden_dim):
    """On JAX too: Keras computes the metrics where only the metrics' variables were mapped
    (gau_keras.bert4keras.jax_training maps the step's weights there as well)."""
    layer = MaximumEntropyMarkovModel(lr_multiplier=2, hidden_dim=hidden_dim)
    model = _tagger(layer)
    model.compile(optimizer="adam", loss=layer.sparse_loss, metrics=[layer.sparse_accuracy])
    ids, labels = _tagging_data(rng)
    model.fit(ids, labels, epochs=2, batch_size=8, verbose=0)
    if keras.backend.backend() == "jax":
        model.jax_state_sync()
    trans = _np(layer.trans) if hidden_dim is None else _np(layer.l_trans) @ _np(layer.r_trans).T
    want = _memm_accuracy(model.predict(ids, verbose=0), labels, trans)
    got = model.evaluate(ids, labels, batch_size=len(ids), verbose=0, return_dict=True)["sparse_accuracy"]
    assert 0.2 < want < 1.0
    assert got == pytest.approx(want, abs=1e-6)


def test_memm_accuracy_in_fit_is_computed_from_the_steps_transitions(rng):
    """fit, one batch: the accuracy of the step's scores with, on JAX, the transitions of its forward
    pass (mapped by gau_keras.bert4keras.jax_training); on TensorFlow the updated ones (Keras 3 computes
    the metrics after applying the gradients there)."""
    layer = MaximumEntropyMarkovModel(lr_multiplier=2)
    model = _tagger(layer)
    model.compile(optimizer=keras.optimizers.Adam(0.5), loss=layer.sparse_loss, metrics=[layer.sparse_accuracy])
    ids, labels = _tagging_data(rng)
    scores, before = model.predict(ids, verbose=0), _np(layer.trans)
    got = model.fit(ids, labels, epochs=1, batch_size=len(ids), verbose=0).history["sparse_accuracy"][0]
    after = _np(layer.trans)
    want = {"jax": _memm_accuracy(scores, labels, before), "tensorflow": _memm_accuracy(scores, labels, after)}
    assert abs(want["jax"] - want["tensorflow"]) > 0.01  # the check tells the two apart
    assert got == pytest.approx(want[keras.backend.backend()], abs=1e-6)


def _path_score(path, emissions, trans):
    return sum(emissions[t, k] for t, k in enumerate(path)) + sum(trans[a, b] for a, b in zip(path, path[1:]))


def test_crf_loss_is_the_path_negative_log_likelihood(rng):
    emissions = rng.normal(size=(2, 4, 3)).astype("float32")
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    labels = rng.integers(0, 3, size=(2, 4))
    crf = ConditionalRandomField(lr_multiplier=2)
    scores = crf(emissions, mask=mask)
    trans = _np(crf.trans)
    np.testing.assert_allclose(trans, 2 * _np(crf._trans), rtol=1e-6)
    expected = []
    for b, length in enumerate(mask.sum(1)):
        paths = itertools.product(range(3), repeat=int(length))
        log_z = np.logaddexp.reduce([_path_score(p, emissions[b], trans) for p in paths])
        expected.append(log_z - _path_score(labels[b, :length], emissions[b], trans))
    np.testing.assert_allclose(_np(crf.sparse_loss(labels, scores)), expected, rtol=1e-5)
    onehot = np.eye(3, dtype="float32")[labels]
    np.testing.assert_allclose(_np(crf.dense_loss(onehot, scores)), expected, rtol=1e-5)
    hits = (emissions.argmax(-1) == labels) & mask
    assert float(crf.sparse_accuracy(labels, scores)) == pytest.approx(hits.sum() / mask.sum())


@pytest.mark.tensorflow_only
def test_gradients_are_finite_through_the_padding(rng):
    emissions = keras.Variable(rng.normal(size=(2, 5, 3)).astype("float32"))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    labels = rng.integers(0, 3, size=(2, 5))
    import tensorflow as tf

    for layer in (ConditionalRandomField(), MaximumEntropyMarkovModel(hidden_dim=2)):
        with tf.GradientTape() as tape:
            loss = keras.ops.sum(layer.sparse_loss(labels, layer(emissions, mask=mask)))
        grads = tape.gradient(loss, [emissions] + layer.trainable_weights)
        assert all(np.all(np.isfinite(_np(g))) for g in grads)
        assert np.all(_np(grads[0])[0, 3:] == 0) and np.any(_np(grads[0])[0, :3] != 0)


def test_mixed_precision_losses_in_float32(rng):
    emissions = rng.normal(size=(2, 5, 3)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    labels = rng.integers(0, 3, size=(2, 5))
    results = {}
    for policy in ("float32", "mixed_float16"):
        for cls in (ConditionalRandomField, MaximumEntropyMarkovModel):
            layer = cls(dtype=policy)
            scores = layer(emissions, mask=mask)
            layer._trans.assign(np.eye(3) - 0.5)
            loss = layer.sparse_loss(labels, scores)
            dtypes = keras.backend.standardize_dtype(loss.dtype), keras.backend.standardize_dtype(scores.dtype)
            assert dtypes == ("float32", "float16" if policy != "float32" else "float32")
            results[policy, cls] = _np(loss)
    for cls in (ConditionalRandomField, MaximumEntropyMarkovModel):
        np.testing.assert_allclose(results["mixed_float16", cls], results["float32", cls], rtol=2e-3)


def test_lr_multiplier_must_be_positive():
    with pytest.raises(ValueError, match="lr_multiplier"):
        ConditionalRandomField(lr_multiplier=0)


@pytest.mark.tensorflow_only
def test_losses_trace_with_unknown_batch_and_length(rng):
    """fit on a generator traces the loss with shape [None, None, N]."""
    import tensorflow as tf

    crf, memm = ConditionalRandomField(), MaximumEntropyMarkovModel()
    emissions = rng.normal(size=(2, 5, 3)).astype("float32")
    labels = rng.integers(0, 3, size=(2, 5)).astype("float32")
    for layer in (crf, memm):
        scores = layer(emissions, mask=np.array([[1, 1, 1, 0, 0], [1] * 5], bool))
        traced = tf.function(
            lambda y, p, layer=layer: layer.sparse_loss(y, p) + layer.sparse_accuracy(y, p),
            input_signature=[tf.TensorSpec([None, None]), tf.TensorSpec([None, None, 3])],
        )
        eager = layer.sparse_loss(labels, scores) + layer.sparse_accuracy(labels, scores)
        np.testing.assert_allclose(_np(traced(labels, scores)), _np(eager), rtol=1e-6)


# ---------------------------------------------------------------- bad labels (issue 36)


@pytest.mark.parametrize("layer_class", [ConditionalRandomField, MaximumEntropyMarkovModel])
def test_labels_outside_the_label_set_are_named_or_give_nan(layer_class):
    layer = layer_class(name="tagger")
    scores = np.random.default_rng(0).normal(size=(2, 4, 3)).astype("float32")
    layer(scores)
    good = np.array([[0, 1, 2, 1], [2, 2, 0, 1]])
    assert np.isfinite(keras.ops.convert_to_numpy(layer.sparse_loss(good, scores))).all()
    for bad, shown in ((3, "3.0"), (-1, "-1.0"), (1.5, "1.5")):
        labels = good.astype("float32")
        labels[1, 2] = bad
        with pytest.raises(ValueError, match=rf"y_true\[1, 2\] = {shown} is not a label \(an integer in \[0, 3\)\)"):
            layer.sparse_loss(labels, scores)
        traced = _traced(layer.sparse_loss)(keras.ops.convert_to_tensor(labels), keras.ops.convert_to_tensor(scores))
        assert np.isnan(keras.ops.convert_to_numpy(traced)).any()  # in a compiled step: NaN, not a loss
    with pytest.raises(ValueError, match=r"y_true has 5 positions per sample where the scores \(y_pred\) have 4"):
        layer.sparse_loss(np.zeros((2, 5)), scores)


def _traced(fn):
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(fn)
    import tensorflow as tf

    return tf.function(fn)


@pytest.mark.parametrize("layer_class", [ConditionalRandomField, MaximumEntropyMarkovModel])
def test_padding_may_hold_any_label(layer_class):
    """bert4keras ignores the label of a padded position (scores -inf): -1 or -100 there is no error."""
    layer = layer_class()
    scores = np.random.default_rng(1).normal(size=(2, 4, 3)).astype("float32")
    layer(scores)
    scores[:, 3] = -np.inf
    labels = np.array([[0, 1, 2, 0], [2, 2, 0, 0]])
    padded = labels.copy()
    padded[:, 3] = -100
    expected = keras.ops.convert_to_numpy(layer.sparse_loss(labels, scores))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.sparse_loss(padded, scores)), expected, rtol=1e-6)
    traced = _traced(layer.sparse_loss)(keras.ops.convert_to_tensor(padded), keras.ops.convert_to_tensor(scores))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(traced), expected, rtol=1e-5)


def test_crf_passes_the_layer_harness():
    run_layer_test(
        ConditionalRandomField, {}, floats(2, 5, 4), (2, 5, 4), input_mask=PADDING, expected_output_mask=None
    )


def test_memm_passes_the_layer_harness():
    run_layer_test(
        MaximumEntropyMarkovModel, {}, floats(2, 5, 4), (2, 5, 4), input_mask=PADDING, expected_output_mask=None
    )
