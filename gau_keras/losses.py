"""Losses of the library's heads and of masked-LM pretraining.

* ``sparse_logits_crossentropy``: softmax cross-entropy on integer targets,
  the loss of every head in ``gau_keras.layers.heads`` but GlobalPointer;
* ``global_pointer_crossentropy``: the multi-label span loss of GlobalPointer;
* ``masked_lm_sums`` / ``masked_positions``: the masked-LM loss of pretraining
  (summed over masked positions) and the static-shape gather of those positions.

Design notes: docs/pretraining.md (The loop).
"""
import keras
from keras import ops

from gau_keras.ops import NEG_INF

PACKAGE = "gau_keras"


@keras.saving.register_keras_serializable(package=PACKAGE)
def global_pointer_crossentropy(y_true, y_pred):
    """Multi-label cross-entropy over all spans of one type (Su's GlobalPointer loss).

    y_true: 0/1 [B, T, L, L]; y_pred: span logits [B, T, L, L]. Per (b, t)
    with positive set P and negative set N:
    log(1 + sum_{N} exp(s)) + log(1 + sum_{P} exp(-s)); averaged over B*T.
    Unlike a sigmoid per span, it does not drown the few positives in the
    L^2 negatives.
    """
    shape = ops.shape(y_pred)
    y_pred = ops.reshape(y_pred, (shape[0] * shape[1], -1))
    y_true = ops.reshape(ops.cast(y_true, y_pred.dtype), ops.shape(y_pred))
    big = ops.cast(-NEG_INF, y_pred.dtype)
    signed = (1.0 - 2.0 * y_true) * y_pred                # s on negatives, -s on positives
    # pushing the other set down by `big` (not negating it) keeps masked spans
    # (s = NEG_INF) at -inf in both terms
    negatives = signed - y_true * big
    positives = signed - (1.0 - y_true) * big
    zeros = ops.zeros_like(y_pred[:, :1])
    loss = (ops.logsumexp(ops.concatenate([negatives, zeros], axis=-1), axis=-1)
            + ops.logsumexp(ops.concatenate([positives, zeros], axis=-1), axis=-1))
    return ops.mean(loss)


def sparse_logits_crossentropy():
    """The loss of every head but GlobalPointer: softmax cross-entropy on integer targets."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def masked_lm_sums(labels, logits):
    """Summed cross-entropy, correct predictions and count over masked positions.

    labels [B, L] (0 = not masked), logits [B, L, V] -> three float32 scalars
    (computed in float32 whatever the logits' dtype).
    """
    weights = ops.cast(ops.greater(labels, 0), "float32")
    logits = ops.cast(logits, "float32")
    losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    correct = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), labels.dtype), labels), "float32")
    return ops.sum(losses * weights), ops.sum(correct * weights), ops.sum(weights)


def masked_positions(labels, k):
    """The first ``k`` masked positions of each row (a static shape for XLA).

    labels [B, L] -> (positions [B, k] int32, their labels [B, k]); rows with
    fewer than k masked tokens are filled with unmasked positions (label 0),
    rows with more lose the excess (counted by the caller).
    """
    masked = ops.cast(ops.greater(labels, 0), "float32")
    _, positions = ops.top_k(masked, k=k, sorted=True)   # ties keep index order
    return positions, ops.take_along_axis(labels, positions, axis=1)
