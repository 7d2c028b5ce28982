"""One cached forward pass of a builder's layers: what ``Transformer.cached_logits`` runs.

The model's own ``apply_embeddings`` / ``apply_main_layers`` run again on a few new tokens
(concrete or traced tensors, not Keras inputs); while a ``DecodeStep`` is current, the
builder's ``apply`` hands it the layers whose call changes with a cache: the attention
layers read and write their key/value cache slots, position embeddings embed the new
tokens' positions, and the attention bias is the step's visibility over the cache.
"""

from keras import ops

from gau_keras.layers import (
    AttentionBias,
    GatedAttentionUnit,
    MultiHeadAttention,
    PositionEmbedding,
    RelativePositionEmbedding,
    SinusoidalPositionEmbedding,
    SRUppCell,
)

#: what ``DecodeStep.call`` returns for a layer it leaves to its own ``__call__``
NOT_ROUTED = object()


class DecodeStep:
    """The state of one cached pass over T new tokens at positions ``index`` .. ``index+T-1``.

    Args:
        caches: the attention layers' ``(k, v)`` caches in call order (a list), or None for
            the first pass (T = N: the caches are made from this pass's keys and values).
        index: int scalar (tensor), the position of the first new token.
        visible: bool [B, T, N], which cache slots each new token may attend to.
        length: T, the number of new tokens (a Python int).
        context: the encoder output [B, Lc, H] a decoder cross-attends to, or None.
        context_mask: bool [B, Lc], its real tokens.
    """

    def __init__(self, caches, index, visible, length, context=None, context_mask=None):
        self.caches = caches
        self.new_caches = []
        self.index = index
        self.visible = visible
        self.context, self.context_mask = context, context_mask
        self.positions = ops.expand_dims(ops.arange(length, dtype="int32") + ops.cast(index, "int32"), 0)

    def call(self, layer, inputs, arguments):
        """``layer``'s output on ``inputs`` in this pass, or ``NOT_ROUTED`` (then the caller
        calls the layer as usual)."""
        if isinstance(layer, (MultiHeadAttention, GatedAttentionUnit)):
            return self._attend(layer, inputs, arguments)
        if isinstance(layer, SRUppCell):
            return self._recur(layer, inputs)
        if isinstance(layer, AttentionBias):
            return self.visible
        if isinstance(layer, RelativePositionEmbedding):
            query, key = inputs
            keys = ops.shape(self.visible)[-1] if key is query else ops.shape(key)[1]
            return layer.at_positions(self.positions[0], ops.arange(keys, dtype="int32"))
        if isinstance(layer, PositionEmbedding) and not layer.custom_position_ids:
            return layer.at_positions(inputs, self.positions)
        if isinstance(layer, SinusoidalPositionEmbedding) and not layer.custom_position_ids:
            return layer.at_positions(inputs, ops.cast(self.positions, "float32"))
        return NOT_ROUTED

    def _attend(self, layer, inputs, arguments):
        """An attention layer over its cache slot (the layers' calls, in order, own one each)."""
        slot = len(self.new_caches)
        cache = None if self.caches is None else self.caches[slot]
        arguments = {k: v for k, v in (arguments or {}).items() if k in ("a_bias", "p_bias")}
        if isinstance(layer, MultiHeadAttention) and inputs[1] is not inputs[0]:
            arguments["cross_mask"] = self.context_mask
        output, cache = layer.attend_cached(inputs, cache, self.index, **arguments)
        self.new_caches.append(cache)
        return output

    def _recur(self, layer, inputs):
        """An SRU++ cell over its cache slot: attention keys and values, and the recurrent state."""
        cache = None if self.caches is None else self.caches[len(self.new_caches)]
        output, cache = layer.attend_cached(inputs, cache, self.index, self.visible, self.real_tokens())
        self.new_caches.append(cache)
        return output

    def real_tokens(self):
        """bool [B, T]: which new tokens are real (visible to themselves: not padding)."""
        shape = ops.shape(self.visible)
        own = ops.broadcast_to(ops.reshape(self.positions, (1, -1, 1)), (shape[0], shape[1], 1))
        return ops.take_along_axis(self.visible, own, axis=-1)[..., 0]


def visibility(token_ids, ranks, query_positions, filled, mask_padding=True):
    """Which cache slots each query may attend to, bool [B, T, N].

    Args:
        token_ids: [B, N] the ids written so far (0 = padding: never visible, with
            ``mask_padding``; a model whose attention sees id 0, as T5's decoder, passes False).
        ranks: int [B, N]: slot j is visible to the query at position p iff
            ``ranks[j] <= ranks[p]`` (the position itself for a causal LM, the running
            sum of segment ids for UniLM).
        query_positions: int [T] the queries' positions.
        filled: int scalar, slots ``>= filled`` hold nothing yet.
    """
    slots = ops.arange(ops.shape(token_ids)[1], dtype="int32")
    real = ops.less(slots, ops.cast(filled, "int32"))[None]
    if mask_padding:
        real = ops.logical_and(ops.not_equal(token_ids, 0), real)
    query_ranks = ops.take(ranks, query_positions, axis=1)  # [B, T]
    return ops.logical_and(real[:, None, :], ops.less_equal(ranks[:, None, :], query_ranks[:, :, None]))


def ranks_of(application, segment_ids):
    """The visibility ranks [B, N] of an application (``visibility``): positions ('lm') or the
    running sum of the segment ids ('unilm', as ``gau_keras.ops.unilm_attention_bias``)."""
    if application == "unilm":
        return ops.cumsum(ops.cast(segment_ids, "int32"), axis=1)
    length = ops.shape(segment_ids)[1]
    return ops.broadcast_to(ops.arange(length, dtype="int32")[None], ops.shape(segment_ids))


__all__ = ["DecodeStep", "NOT_ROUTED", "ranks_of", "visibility"]
