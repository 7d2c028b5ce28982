"""Losses of the library's heads and of masked-LM pretraining.

* ``sparse_logits_crossentropy``: softmax cross-entropy on integer targets,
  the loss of every head in ``gau_keras.layers.heads`` but GlobalPointer;
* ``multilabel_categorical_crossentropy`` (and its sparse form): Su's multi-label
  cross-entropy on logits, also bert4keras's ``backend`` functions;
* ``global_pointer_crossentropy``: the multi-label span loss of GlobalPointer, built on it;
* ``masked_lm_sums`` / ``masked_positions``: the masked-LM loss of pretraining
  (summed over masked positions) and the static-shape gather of those positions.

Design notes: docs/pretraining.md (The loop).
"""

import math

import keras
from keras import ops

from gau_keras.registration import PACKAGE


def _log_one_plus_sum_exp(logits, log_weights):
    """log(1 + sum_j w_j e^(s_j)) over the last axis; an entry with log w = -inf drops out."""
    threshold = ops.zeros_like(logits[..., :1])  # the "1 +": a class at logit 0 separating the two sets
    return ops.logsumexp(ops.concatenate([logits + log_weights, threshold], axis=-1), axis=-1)


@keras.saving.register_keras_serializable(package=PACKAGE)
def multilabel_categorical_crossentropy(y_true, y_pred):
    """Multi-label crossentropy on logits (Su's): per row,
    log(1 + sum_neg e^s) + log(1 + sum_pos e^-s).

    y_true: [..., C] in [0, 1] (how much each class is a target); y_pred:
    logits [..., C] (no sigmoid/softmax; -inf = a class left out); predict
    the classes with y_pred > 0. Returns [...].
    """
    y_true = ops.cast(y_true, y_pred.dtype)
    present = ops.not_equal(y_pred, -math.inf)
    negatives = _log_one_plus_sum_exp(ops.where(present, y_pred, -math.inf), ops.log(1 - y_true))
    positives = _log_one_plus_sum_exp(ops.where(present, -y_pred, -math.inf), ops.log(y_true))
    return negatives + positives


@keras.saving.register_keras_serializable(package=PACKAGE)
def sparse_multilabel_categorical_crossentropy(y_true, y_pred, mask_zero=False):
    """``multilabel_categorical_crossentropy`` with the targets as class indices.

    y_true: int [..., P], the positive classes of each row (index C = the
    threshold class at logit 0); y_pred: logits [..., C]. ``mask_zero``: index 0
    pads ``y_true`` and class 0 is no class at all. The negative term
    log(sum_all e^s - sum_pos e^s) is computed as
    lse_all + log(clip(1 - e^(lse_pos - lse_all), epsilon, 1)). Returns [...].
    """
    logits = ops.concatenate([y_pred, ops.zeros_like(y_pred[..., :1])], axis=-1)
    positive = ops.take_along_axis(logits, ops.cast(y_true, "int32"), axis=-1)
    positive_for_pos, positive_for_neg = positive, positive
    if mask_zero:
        padding = ops.equal(y_true, 0)
        positive_for_pos = ops.where(padding, math.inf, positive)  # e^-s = 0: no positive term
        positive_for_neg = ops.where(padding, -math.inf, positive)  # e^s = 0: nothing to subtract
        logits = ops.where(ops.equal(ops.arange(ops.shape(logits)[-1]), 0), -math.inf, logits)
    pos_loss = _log_one_plus_sum_exp(-positive_for_pos, ops.zeros_like(positive))
    lse_all = ops.logsumexp(logits, axis=-1)
    share = ops.exp(ops.logsumexp(positive_for_neg, axis=-1) - lse_all)  # of e^s over all classes, on positives
    return pos_loss + lse_all + ops.log(ops.clip(1 - share, keras.config.epsilon(), 1))


@keras.saving.register_keras_serializable(package=PACKAGE)
def global_pointer_crossentropy(y_true, y_pred):
    """Multi-label cross-entropy over all spans of one type (Su's GlobalPointer loss).

    y_true: 0/1 [B, T, L, L]; y_pred: span logits [B, T, L, L]. Per (b, t),
    ``multilabel_categorical_crossentropy`` over its L² spans; averaged over B*T.
    Unlike a sigmoid per span, it does not drown the few positives in the
    L² negatives. Masked spans (s = NEG_INF) drop out of both terms.
    """
    shape = ops.shape(y_pred)
    y_pred = ops.reshape(y_pred, (shape[0] * shape[1], -1))
    y_true = ops.reshape(y_true, ops.shape(y_pred))
    return ops.mean(multilabel_categorical_crossentropy(y_true, y_pred))


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
    _, positions = ops.top_k(masked, k=k, sorted=True)  # ties keep index order
    return positions, ops.take_along_axis(labels, positions, axis=1)
