"""GlobalPointer: scores every (start, end) span of a sequence for each entity type."""
import math

import keras
from keras import ops

from gau_keras import ops as gops


@keras.saving.register_keras_serializable(package="gau_keras")
class GlobalPointer(keras.layers.Layer):
    """Span scores for ``heads`` entity types (Su Jianlin's GlobalPointer).

    For each type t, one Dense projection gives q_t, k_t [B, L, head_size]
    per token; with ``rope`` both get the rotary position encoding (the
    interleaved layout of ``gau_keras.ops.apply_rotary``), so the score

        s_t(i, j) = <q_t(i), k_t(j)> / sqrt(head_size)

    depends on the relative position of start i and end j. Spans touching a
    padded position, and with ``tril_mask`` spans with j < i, get ``gau_keras.ops.NEG_INF``.

    Input: hidden states [B, L, H]; an optional mask [B, L] (True = real
    token; the Keras mask of the input is used when none is passed).
    Output: span logits [B, heads, L, L] (start, end); a span of type t is
    predicted when s_t(i, j) > 0.
    """

    def __init__(self, heads, head_size, rope=True, tril_mask=True,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if head_size % 2 and rope:
            raise ValueError(f"GlobalPointer: head_size must be even with rope=True, got {head_size}")
        self.heads = int(heads)
        self.head_size = int(head_size)
        self.rope = rope
        self.tril_mask = tril_mask
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        self.dense = keras.layers.Dense(self.heads * self.head_size * 2,
                                        kernel_initializer=self.kernel_initializer, name="dense")
        self.dense.build(input_shape)

    def call(self, inputs, mask=None):
        x = self.dense(inputs)                                              # [B, L, T*2d]
        shape = ops.shape(x)
        x = ops.reshape(x, (shape[0], shape[1], self.heads, 2 * self.head_size))
        q, k = x[..., :self.head_size], x[..., self.head_size:]            # [B, L, T, d]
        if self.rope:
            positions = ops.arange(shape[1], dtype="float32")
            sinusoidal = ops.expand_dims(gops.sinusoidal_embeddings(positions, self.head_size), 0)
            q, k = gops.apply_rotary(sinusoidal, q), gops.apply_rotary(sinusoidal, k)
        logits = ops.einsum("bmtd,bntd->btmn", q, k) / math.sqrt(self.head_size)
        allowed = None
        if mask is not None:
            mask = ops.cast(mask, "bool")
            allowed = ops.logical_and(mask[:, None, :, None], mask[:, None, None, :])
        if self.tril_mask:
            index = ops.arange(shape[1])
            upper = ops.less_equal(index[:, None], index[None, :])[None, None]  # start <= end
            allowed = upper if allowed is None else ops.logical_and(allowed, upper)
        if allowed is not None:
            logits = gops.masked_fill(logits, allowed)
        return logits

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.heads, input_shape[1], input_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update(heads=self.heads, head_size=self.head_size, rope=self.rope,
                      tril_mask=self.tril_mask,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer))
        return config
