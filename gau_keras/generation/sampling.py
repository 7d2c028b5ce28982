"""Choosing the next id from a distribution, on the device (``keras.ops``): what bert4keras's
``random_sample`` does with numpy, as one function of tensors."""

from keras import ops


def choose(probas, uniform, topk=0, topp=1.0):
    """One id per row of ``probas``, by inverse-CDF sampling of ``uniform``.

    As bert4keras's ``random_sample``: keep the ``topk`` most likely ids (0: all), renormalise,
    keep the most likely ids whose probabilities first reach ``topp`` in total (1.0: all),
    renormalise, draw. Ties between equal probabilities are broken by id.

    Args:
        probas: float32 [B, V], each row a distribution.
        uniform: float32 [B] in [0, 1), one draw per row.
        topk: int scalar (tensor), 0 = no cut.
        topp: float scalar (tensor), 1.0 = no cut.
    Returns:
        int32 [B], the chosen ids.
    """
    vocab = ops.shape(probas)[-1]
    ordered, order = ops.top_k(probas, vocab)  # descending
    ranks = ops.arange(vocab, dtype="int32")[None]
    topk = ops.cast(topk, "int32")
    kept = ops.logical_or(ops.less_equal(topk, 0), ops.less(ranks, topk))
    ordered = _renormalised(ops.where(kept, ordered, 0.0))
    before = ops.cumsum(ordered, axis=-1) - ordered  # what the more likely ids already reach
    ordered = _renormalised(ops.where(ops.less(before, ops.cast(topp, ordered.dtype)), ordered, 0.0))
    cdf = ops.cumsum(ordered, axis=-1)
    target = ops.cast(uniform, cdf.dtype)[:, None] * cdf[:, -1:]
    picked = ops.minimum(ops.sum(ops.cast(ops.less_equal(cdf, target), "int32"), axis=-1), vocab - 1)
    return ops.cast(ops.take_along_axis(order, picked[:, None], axis=-1)[:, 0], "int32")


def _renormalised(probas):
    return probas / ops.maximum(ops.sum(probas, axis=-1, keepdims=True), 1e-30)
