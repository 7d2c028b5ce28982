"""GlobalPointer and EfficientGlobalPointer: score every (start, end) span of a
sequence for each entity type, with bert4keras's arguments and weights."""

import math

import keras
from keras import ops

from gau_keras import ops as gops
from gau_keras.registration import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class GlobalPointer(keras.layers.Layer):
    """Span scores for ``heads`` entity types (Su Jianlin's GlobalPointer).

    For each type t, one Dense projection (``dense``, kernel [H, heads*2*head_size],
    laid out type by type, q then k) gives q_t, k_t [B, L, head_size] per token;
    with ``RoPE`` both get the rotary position encoding (the interleaved layout
    of ``gau_keras.ops.apply_rotary``), so the score

        s_t(i, j) = <q_t(i), k_t(j)> / sqrt(head_size)

    depends on the relative position of start i and end j. Spans touching a
    padded position, and with ``tril_mask`` spans with j < i, get
    ``gau_keras.ops.NEG_INF`` (bert4keras: -inf; every use, ``> 0`` decoding and
    the multi-label losses, treats the two alike).

    Input: hidden states [B, L, H]; an optional mask [B, L] (True = real
    token; the Keras mask of the input is used when none is passed).
    Output: span logits [B, heads, L, L] (start, end); a span of type t is
    predicted when s_t(i, j) > 0.
    """

    def __init__(
        self, heads, head_size, RoPE=True, use_bias=True, tril_mask=True, kernel_initializer="lecun_normal", **kwargs
    ):
        super().__init__(**kwargs)
        if head_size % 2 and RoPE:
            raise ValueError(f"{type(self).__name__}: head_size must be even with RoPE=True, got {head_size}")
        self.heads = int(heads)
        self.head_size = int(head_size)
        self.RoPE = RoPE
        self.use_bias = use_bias
        self.tril_mask = tril_mask
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def _dense(self, units, name):
        return keras.layers.Dense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            name=name,
            dtype=self.dtype_policy,
        )

    def build(self, input_shape):
        self.dense = self._dense(self.heads * self.head_size * 2, "dense")
        self.dense.build(input_shape)

    def _rotate(self, q, k):
        """RoPE on q, k [B, L, (T,) d] when enabled."""
        if not self.RoPE:
            return q, k
        positions = ops.arange(ops.shape(q)[1], dtype="float32")
        sinusoidal = ops.expand_dims(gops.sinusoidal_embeddings(positions, self.head_size), 0)
        return gops.apply_rotary(sinusoidal, q), gops.apply_rotary(sinusoidal, k)

    def span_logits(self, inputs):
        """Unmasked logits [B, heads, L, L]."""
        x = self.dense(inputs)  # [B, L, T*2d]
        shape = ops.shape(x)
        x = ops.reshape(x, (shape[0], shape[1], self.heads, 2 * self.head_size))
        q, k = self._rotate(x[..., : self.head_size], x[..., self.head_size :])  # [B, L, T, d]
        return ops.einsum("bmtd,bntd->btmn", q, k) / math.sqrt(self.head_size)

    def call(self, inputs, mask=None):
        logits = self.span_logits(inputs)
        length = ops.shape(logits)[2]
        allowed = None
        if mask is not None:
            gops.check_mask(mask, logits, [2, 3], f"{type(self).__name__} {self.name!r}")
            mask = ops.cast(mask, "bool")
            allowed = ops.logical_and(mask[:, None, :, None], mask[:, None, None, :])
        if self.tril_mask:
            index = ops.arange(length)
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
        config.update(
            heads=self.heads,
            head_size=self.head_size,
            RoPE=self.RoPE,
            use_bias=self.use_bias,
            tril_mask=self.tril_mask,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "rope" in config:  # .keras files written before the bert4keras spelling
            config["RoPE"] = config.pop("rope")
        return super().from_config(config)


@keras.saving.register_keras_serializable(package=PACKAGE)
class EfficientGlobalPointer(GlobalPointer):
    """GlobalPointer with one q/k projection shared by all types (Su's Efficient
    GlobalPointer): ``p_dense`` [H, 2*head_size] gives interleaved q (even
    columns) and k (odd columns); ``q_dense`` [2*head_size, 2*heads] gives per
    type a start bias (odd columns) and an end bias (even columns), each halved:

        s_t(i, j) = <q(i), k(j)> / sqrt(head_size) + b_t^end(j) + b_t^start(i)

    Arguments, masking and output as GlobalPointer.
    """

    def build(self, input_shape):
        self.p_dense = self._dense(self.head_size * 2, "p_dense")
        self.p_dense.build(input_shape)
        self.q_dense = self._dense(self.heads * 2, "q_dense")
        self.q_dense.build(tuple(input_shape[:-1]) + (self.head_size * 2,))

    def span_logits(self, inputs):
        x = self.p_dense(inputs)  # [B, L, 2d]
        q, k = self._rotate(x[..., ::2], x[..., 1::2])
        logits = ops.einsum("bmd,bnd->bmn", q, k) / math.sqrt(self.head_size)
        bias = ops.transpose(self.q_dense(x), (0, 2, 1)) / 2.0  # [B, 2T, L]
        end_bias, start_bias = bias[:, ::2, None, :], bias[:, 1::2, :, None]
        return logits[:, None] + end_bias + start_bias
