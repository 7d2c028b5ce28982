"""Attention layers: the Gated Attention Unit (GAU-alpha), bert4keras's
multi-head attention (RoFormerV2) and the LM/UniLM attention-bias layer.

Design notes: docs/models.md.
"""

import math

import keras
from keras import ops

from gau_keras import ops as gops
from gau_keras.layers.normalization import ScaleOffset
from gau_keras.layers.recompute import recompute_call
from gau_keras.registration import PACKAGE


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _dense(units, activation, use_bias, initializer, name):
    return _Dense(units, activation=activation, use_bias=use_bias, kernel_initializer=initializer, name=name)


class _Dense(keras.layers.Dense):
    """``keras.layers.Dense`` whose product is ``gau_keras.ops.matmul``: rounded to nearest
    in bfloat16 where TensorFlow's kernel truncates (off GPUs and TPUs); ``ops.matmul``
    elsewhere, as ``keras.layers.Dense`` computes it."""

    def call(self, inputs, training=None):
        if self.quantization_mode is not None or not gops.bfloat16_matmul_truncates(inputs):
            return super().call(inputs, training=training)
        x = gops.matmul(inputs, self.kernel)
        if self.bias is not None:
            x = ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x


class _AttentionBase(keras.layers.Layer):
    """Input bookkeeping shared by GAU and MHA.

    ``inputs`` is ``[x]`` (self-attention) or ``[q, k, v]``, followed by the
    attention bias when ``a_bias`` is true and by the position input of
    ``p_bias``: the sinusoidal embeddings for ``'rotary'``, the relative
    position embeddings [Lq, Lk, key_size] for ``'typical_relative'`` (NEZHA).
    """

    #: the position inputs the layer takes (``p_bias``)
    position_biases = (None, "rotary")

    def __init__(
        self,
        normalization,
        attention_scale,
        attention_dropout,
        softmax_plus_min_len,
        kernel_initializer,
        recompute=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.recompute = bool(recompute)
        if normalization not in gops.ATTENTION_NORMALIZATIONS:
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: normalization must be one of "
                f"{gops.ATTENTION_NORMALIZATIONS}, got {normalization!r}"
            )
        self.supports_masking = True
        self.normalization = normalization
        self.attention_scale = attention_scale
        self.attention_dropout = attention_dropout or 0.0
        self.softmax_plus_min_len = softmax_plus_min_len
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.dropout = keras.layers.Dropout(self.attention_dropout, name="attention_dropout")

    def _split_inputs(self, inputs, n_main, a_bias, p_bias):
        inputs = _as_list(inputs)
        if p_bias not in self.position_biases:
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: p_bias must be one of {self.position_biases}, got {p_bias!r}"
            )
        n_expected = n_main + bool(a_bias) + (p_bias is not None)
        if len(inputs) != n_expected:
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: expected {n_expected} inputs "
                f"(a_bias={a_bias!r}, p_bias={p_bias!r}), got {len(inputs)}"
            )
        main = inputs[:n_main]
        bias = inputs[n_main] if a_bias else None
        position = inputs[-1] if p_bias is not None else None
        return main, bias, position

    def _normalize(self, a, key_mask, bias, training):
        a = gops.attention_normalize(a, key_mask, self.normalization, bias, self.softmax_plus_min_len)
        return self.dropout(a, training=training)

    def compute_mask(self, inputs, mask=None):
        return _as_list(mask)[0] if mask is not None else None

    def call(self, inputs, mask=None, a_bias=None, p_bias=None, training=None):
        if not (self.recompute and training):
            return self.attend(inputs, mask, a_bias, p_bias, training)
        several = isinstance(inputs, (list, tuple))
        return recompute_call(
            self,
            lambda *xs: self.attend(list(xs) if several else xs[0], mask, a_bias, p_bias, training),
            _as_list(inputs),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            recompute=self.recompute,
            normalization=self.normalization,
            attention_scale=self.attention_scale,
            attention_dropout=self.attention_dropout,
            softmax_plus_min_len=self.softmax_plus_min_len,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
        )
        return config


def _positions_last(x, one_token):
    """[B, L, d] -> [B, d, L] (a cache's layout); ``one_token`` (L = 1): a reshape, the same
    order of elements, which XLA keeps in the cache's layout (a transpose made it give the
    whole loop-carried cache the update's layout, and copy it each step)."""
    if one_token:
        return ops.reshape(x, (ops.shape(x)[0], ops.shape(x)[2], 1))
    return ops.swapaxes(x, 1, 2)


def _weighted_values(attention, v, cached):
    """attention [B, Lq, Lk] times v [B, Lk, e], or a cache's vᵀ [B, e, Lk] (``cached``): there
    an einsum, which XLA takes as one product over the cache's layout (a matmul with the
    transpose made it copy the whole cache each step), except where ``gops.matmul`` must
    round TensorFlow's bfloat16 CPU product."""
    if not cached:
        return gops.matmul(attention, v)
    if gops.bfloat16_matmul_truncates(attention):
        return gops.matmul(attention, ops.swapaxes(v, 1, 2))
    return ops.einsum("bjk,bdk->bjd", attention, ops.cast(v, attention.dtype))


def _scores(q, k):
    """q kᵀ, [B, Lq, s] x [B, Lk, s] -> [B, Lq, Lk].

    GAU's products are ``gau_keras.ops.matmul``, not ``ops.einsum``: on TensorFlow off
    GPUs the bfloat16 einsum sums in bfloat16 and the matmul truncates; together they
    put the bundled GAU-alpha's bf16 MLM probabilities 3-4x further from float32's than
    on JAX (issue 51). On JAX it is the same dot_general as the einsum.
    """
    return gops.matmul(q, ops.swapaxes(k, -1, -2))


@keras.saving.register_keras_serializable(package=PACKAGE)
class GatedAttentionUnit(_AttentionBase):
    """Gated Attention Unit (Hua et al. 2022) as in bert4keras / GAU-alpha.

    Self-attention (``self_attention=True``), x [B, L, H]::

        u, v, qk = split(act(x W_i), [e, e, s]);  q, k = qk*γq(+βq), qk*γk(+βk)
        o = (u * (normalize(q kᵀ / sqrt(s)) v)) W_o          -> [B, L, H]

    Cross variant, inputs [q, k, v]: ``u, q = split(act(q W_i), [e, s])``,
    ``k = act(k W_k)``, ``v = act(v W_v)``. Keys are masked with the mask of
    ``x`` (or of ``v``); ``a_bias`` adds an attention bias [B|1, Lq, Lk]
    (LM/UniLM); ``p_bias='rotary'`` applies RoPE from sinusoidal embeddings
    [1|B, L, s] to q and k.
    """

    def __init__(
        self,
        units,
        key_size,
        activation="swish",
        use_bias=True,
        normalization="squared_relu",
        self_attention=True,
        attention_scale=True,
        attention_dropout=None,
        kernel_initializer="glorot_uniform",
        softmax_plus_min_len=16,
        recompute=False,
        **kwargs,
    ):
        super().__init__(
            normalization,
            attention_scale,
            attention_dropout,
            softmax_plus_min_len,
            kernel_initializer,
            recompute,
            **kwargs,
        )
        self.units = units
        self.key_size = key_size
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias
        self.self_attention = self_attention

    def build(self, input_shape):
        shapes = input_shape if isinstance(input_shape[0], (list, tuple)) else [input_shape]
        hidden = shapes[0][-1]
        init, act, bias = self.kernel_initializer, self.activation, self.use_bias
        if self.self_attention:
            self.i_dense = _dense(2 * self.units + self.key_size, act, bias, init, "i_dense")
            self.i_dense.build(shapes[0])
        else:
            self.i_dense = _dense(self.units + self.key_size, act, bias, init, "i_dense")
            self.k_dense = _dense(self.key_size, act, bias, init, "k_dense")
            self.v_dense = _dense(self.units, act, bias, init, "v_dense")
            self.i_dense.build(shapes[0])
            self.k_dense.build(shapes[1])
            self.v_dense.build(shapes[2])
        self.o_dense = _dense(hidden, None, bias, init, "o_dense")
        self.o_dense.build(tuple(shapes[0][:-1]) + (self.units,))
        self.q_scaleoffset = ScaleOffset(offset=self.use_bias, name="q_scaleoffset")
        self.k_scaleoffset = ScaleOffset(offset=self.use_bias, name="k_scaleoffset")
        self.q_scaleoffset.build((self.key_size,))
        self.k_scaleoffset.build((self.key_size,))

    def attend(self, inputs, mask=None, a_bias=None, p_bias=None, training=None):
        """The layer's computation (``call`` adds recompute around it)."""
        n_main = 1 if self.self_attention else 3
        main, bias, sinusoidal = self._split_inputs(inputs, n_main, a_bias, p_bias)
        masks = _as_list(mask) if mask is not None else [None] * len(_as_list(inputs))
        u, q, k, v = self._projections(main, sinusoidal)
        key_mask = masks[0] if self.self_attention else masks[2]
        return self._attention(u, q, k, v, key_mask, bias, training)

    def _projections(self, main, sinusoidal):
        """The gate u [B, Lq, e], q [B, Lq, s], k [B, Lk, s] (rotated when ``sinusoidal`` is
        given) and v [B, Lk, e] of the main inputs (``[x]`` or ``[q, k, v]``)."""
        if self.self_attention:
            u, v, qk = ops.split(self.i_dense(main[0]), [self.units, 2 * self.units], axis=-1)
            q, k = self.q_scaleoffset(qk), self.k_scaleoffset(qk)
        else:
            u, q = ops.split(self.i_dense(main[0]), [self.units], axis=-1)
            k, v = self.k_dense(main[1]), self.v_dense(main[2])
            q, k = self.q_scaleoffset(q), self.k_scaleoffset(k)
        if sinusoidal is not None:
            q, k = gops.apply_rotary(sinusoidal, q), gops.apply_rotary(sinusoidal, k)
        return u, q, k, v

    def attend_cached(self, inputs, cache, index, a_bias=None, p_bias=None):
        """Self-attention of new tokens over a key/value cache (cached decoding).

        Args:
            inputs: as ``call``'s: ``[x, visible, (sinusoidal)]``, x [B, T, H] the hidden
                states of the tokens at positions ``index`` .. ``index + T - 1``; ``visible``
                bool [B|1, T, N] which cache slots each may attend to (padding, unfilled slots
                and the application's mask folded in, so softmax_plus counts what the
                uncached call counts); ``sinusoidal`` [1|B, T, s] their rotary embeddings.
            cache: ``(kᵀ, vᵀ)`` [B, s, N], [B, e, N], or None: then T = N and this call's keys
                and values are the cache.
            index: int scalar (tensor), the position of the first new token.
        Returns:
            (output [B, T, H], the cache with slots ``index`` .. ``index + T - 1`` set).
        """
        if not self.self_attention:
            raise ValueError(f"GatedAttentionUnit {self.name!r}: only self-attention takes a key/value cache")
        main, bias, sinusoidal = self._split_inputs(inputs, 1, a_bias, p_bias)
        u, q, k, v = self._projections(main, sinusoidal)
        # keys and values are cached positions last, [B, s|e, N]: XLA on a CPU emits a step's
        # products of its one query row as loops summing over N, which read [B, N, s|e] with a
        # stride (30x slower at N = 2064) or copied the whole cache into this layout each step
        one_token = cache is not None and k.shape[1] == 1
        k, v = _positions_last(k, one_token), _positions_last(v, one_token)
        if cache is not None:
            k = ops.slice_update(cache[0], [0, 0, index], ops.cast(k, cache[0].dtype))
            v = ops.slice_update(cache[1], [0, 0, index], ops.cast(v, cache[1].dtype))
        if cache is None or bias is None:
            return self._attention(u, q, k, v, None, bias, False, cached=True), (k, v)
        mixed = gops.over_filled_slots(
            lambda q, k, v, bias: self._mixed(q, k, v, None, bias, False, cached=True),
            index + ops.shape(q)[1],
            [(q, None), (k, -1), (v, -1), (bias, -1)],
        )
        return self.o_dense(u * mixed), (k, v)

    def _attention(self, u, q, k, v, key_mask, bias, training, cached=False):
        """``o_dense(u * (normalize(q kᵀ) v))`` -> [B, Lq, H]; ``cached``: k and v are a
        cache's, positions last ([B, s|e, Lk])."""
        return self.o_dense(u * self._mixed(q, k, v, key_mask, bias, training, cached))

    def _mixed(self, q, k, v, key_mask, bias, training, cached):
        """``normalize(q kᵀ) v`` -> [B, Lq, e] (``_attention``'s arguments)."""
        scores = (lambda q, k: gops.matmul(q, k)) if cached else _scores  # noqa: E731
        if self.normalization == "softmax_plus" and (bias is None or bias.dtype == "bool"):
            # the per-row factor scale·ln(n)/ln(512) multiplies q [B, Lq, s] instead of the
            # logits [B, Lq, Lk]: one pass over a small tensor instead of one over the largest
            q = q * ops.cast(self._softmax_plus_factor(ops.shape(v)[2 if cached else 1], key_mask, bias), q.dtype)
            a = scores(q, k)
            attention = self.dropout(gops.attention_normalize(a, key_mask, "softmax", bias), training=training)
            return _weighted_values(attention, v, cached)
        a = scores(q, k)
        if self.attention_scale:
            a = a / self.key_size**0.5
        attention = self._normalize(a, key_mask, bias, training)
        return _weighted_values(attention, v, cached)

    def _softmax_plus_factor(self, keys, key_mask, bias):
        """float32 [B|1, Lq|1, 1]: softmax_plus's ln(max(n, min_len)) / ln(512) times the
        attention scale, n = the keys each query may attend to: from the key mask alone
        ([B, 1, 1]) or, under a boolean LM/UniLM visibility mask, counted per query row
        (an additive float bias is scaled with the logits: ``attend`` spells that case out)."""
        allowed = None if key_mask is None else ops.cast(key_mask, "bool")[:, None, :]  # [B, 1, Lk]
        if bias is not None:
            allowed = bias if allowed is None else ops.logical_and(allowed, bias)  # [B|1, Lq, Lk]
        if allowed is None:
            n = ops.cast(keys, "float32")
        else:
            n = ops.sum(ops.cast(allowed, "float32"), axis=-1, keepdims=True)
        n = ops.maximum(n, float(self.softmax_plus_min_len))
        factor = ops.log(n) / math.log(512.0)
        if self.attention_scale:
            factor = factor / self.key_size**0.5
        return ops.reshape(factor, (-1, 1, 1)) if len(factor.shape) == 0 else factor

    def compute_output_shape(self, input_shape):
        shapes = input_shape if isinstance(input_shape[0], (list, tuple)) else [input_shape]
        return tuple(shapes[0])

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units,
            key_size=self.key_size,
            activation=keras.activations.serialize(self.activation),
            use_bias=self.use_bias,
            self_attention=self.self_attention,
        )
        return config


def _cache_layout(kw, vw, one_token=False):
    """MultiHeadAttention's per-head k [B, L, heads, d], v [B, L, heads, d'] -> a key/value
    cache's layout, that of a decoding step's products (positions last): [B, heads, d, L].
    ``one_token`` (L = 1): a reshape, the same order of elements, which XLA keeps in the
    cache's layout (a transpose made it give the whole cache the update's layout)."""
    if one_token:
        return tuple(ops.reshape(x, (ops.shape(x)[0], ops.shape(x)[2], ops.shape(x)[3], 1)) for x in (kw, vw))
    return ops.transpose(kw, (0, 2, 3, 1)), ops.transpose(vw, (0, 2, 3, 1))


def _step_layout(kw, vw):
    """``_cache_layout``'s inverse."""
    return ops.transpose(kw, (0, 3, 1, 2)), ops.transpose(vw, (0, 3, 1, 2))


def fused_attention_device():
    """Whether this program runs where cuDNN's fused (flash) attention may: JAX on a GPU, unless
    ``keras.config.disable_flash_attention()`` was called. Everywhere else (TensorFlow, a CPU,
    a TPU) MultiHeadAttention spells its attention out: Keras's ``ops.dot_product_attention``
    would run its XLA computation there (on a TPU too whenever a mask is traced, as a padding
    mask in a jitted step is), which keeps float32 logits, float32 probabilities and the
    broadcast mask for the backward pass, where ``masked_softmax`` keeps one compute-dtype
    tensor. The choice is made when the call is traced, from JAX's default backend."""
    if keras.backend.backend() != "jax" or keras.config.is_flash_attention_enabled() is False:
        return False
    import jax

    return jax.default_backend() == "gpu"


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiHeadAttention(_AttentionBase):
    """bert4keras's multi-head attention, inputs ``[q, k, v, (bias), (position)]``.

    q [B, Lq, Dq], k [B, Lk, Dk], v [B, Lk, Dv] -> [B, Lq, out_dim] (out_dim
    defaults to heads * head_size, as in bert4keras). Keys are masked with v's
    mask; the bias is [B|1, Lq, Lk] (shared by the heads; bool = visibility,
    float = added) or a float [B|1, heads, Lq, Lk] (RealFormer's residual
    scores). ``p_bias='rotary'``: RoPE per head from sinusoidal embeddings
    [B|1, L, key_size] (key_size must be even); ``'typical_relative'``:
    NEZHA's relative embeddings [Lq, Lk, key_size]; ``'t5_relative'``: T5's bucketed bias
    [Lq, Lk, heads] added to the scores. ``return_attention_scores`` also returns
    the scaled scores before masking and normalisation, [B, heads, Lq, Lk].
    On JAX on a GPU, a softmax call without attention dropout (``fusable``)
    runs as cuDNN's fused (flash) attention where cuDNN takes it (bfloat16 or
    float16, its head sizes and lengths); the others, and every call on other
    devices and on TensorFlow, spell the attention out.
    """

    position_biases = (None, "rotary", "typical_relative", "t5_relative")

    def __init__(
        self,
        heads,
        head_size,
        out_dim=None,
        key_size=None,
        use_bias=True,
        normalization="softmax",
        attention_scale=True,
        attention_dropout=None,
        return_attention_scores=False,
        kernel_initializer="glorot_uniform",
        softmax_plus_min_len=16,
        recompute=False,
        **kwargs,
    ):
        super().__init__(
            normalization,
            attention_scale,
            attention_dropout,
            softmax_plus_min_len,
            kernel_initializer,
            recompute,
            **kwargs,
        )
        self.heads = heads
        self.head_size = head_size
        self.out_dim = out_dim or heads * head_size
        self.return_attention_scores = bool(return_attention_scores)
        self.key_size = key_size or head_size
        self.use_bias = use_bias

    def build(self, input_shape):
        q_shape, k_shape, v_shape = input_shape[:3]
        out_dim = self.out_dim
        init, bias = self.kernel_initializer, self.use_bias
        self.q_dense = _dense(self.key_size * self.heads, None, bias, init, "q_dense")
        self.k_dense = _dense(self.key_size * self.heads, None, bias, init, "k_dense")
        self.v_dense = _dense(self.head_size * self.heads, None, bias, init, "v_dense")
        self.o_dense = _dense(out_dim, None, bias, init, "o_dense")
        self.q_dense.build(q_shape)
        self.k_dense.build(k_shape)
        self.v_dense.build(v_shape)
        self.o_dense.build(tuple(q_shape[:-1]) + (self.head_size * self.heads,))

    def _heads(self, x, size):
        shape = ops.shape(x)
        return ops.reshape(x, [shape[0], shape[1], self.heads, size])

    def attend(self, inputs, mask=None, a_bias=None, p_bias=None, training=None):
        """The layer's computation (``call`` adds recompute around it)."""
        (q, k, v), bias, position = self._split_inputs(inputs, 3, a_bias, p_bias)
        masks = _as_list(mask) if mask is not None else [None] * len(_as_list(inputs))
        qw, kw, vw = self._projections(q, k, v, position, p_bias)
        return self._attention(qw, kw, vw, masks[2], bias, position, p_bias, training)

    def _projections(self, q, k, v, position, p_bias):
        """Per-head q [B, Lq, heads, key_size], k [B, Lk, heads, key_size] (rotated under
        ``p_bias='rotary'``) and v [B, Lk, heads, head_size]."""
        qw = self._heads(self.q_dense(q), self.key_size)
        kw = self._heads(self.k_dense(k), self.key_size)
        vw = self._heads(self.v_dense(v), self.head_size)
        if p_bias == "rotary":
            qw, kw = gops.apply_rotary(position, qw), gops.apply_rotary(position, kw)
        return qw, kw, vw

    def attend_cached(self, inputs, cache, index, a_bias=None, p_bias=None, cross_mask=None):
        """Attention of new tokens over a key/value cache (cached decoding).

        Args:
            inputs: as ``call``'s: ``[x, x, x, visible, (position)]``, x [B, T, D] the
                hidden states of the tokens at positions ``index`` .. ``index + T - 1``;
                ``visible`` bool [B|1, T, N] which cache slots each may attend to (padding,
                unfilled slots and the application's mask folded in); ``position`` their
                rotary embeddings [1|B, T, key_size] or relative ones [T, N, .]. Cross-attention
                (``cross_mask`` given): ``[x, context, context, (position)]``.
            cache: ``(k, v)`` [B, heads, key_size, N], [B, heads, head_size, N], or None:
                then T = N and this call's keys and values are the cache (cross-attention:
                the context's, made on the first call and read after).
            index: int scalar (tensor), the position of the first new token.
            cross_mask: bool [B, Lc], the context's real tokens, for cross-attention.
        Returns:
            (output [B, T, out_dim], the cache with slots ``index`` .. ``index + T - 1`` set).
        """
        # the cache is kept in the layout of the step's two batched products, [B, heads, d, N]:
        # kept [B, N, heads, d], XLA's CPU loop copied every layer's whole cache into it each step
        (q, k, v), bias, position = self._split_inputs(inputs, 3, a_bias, p_bias)
        if cross_mask is not None:  # cross-attention: the context's keys and values, projected once
            qw = self._heads(self.q_dense(q), self.key_size)
            if cache is None:
                cache = _cache_layout(
                    self._heads(self.k_dense(k), self.key_size), self._heads(self.v_dense(v), self.head_size)
                )
            o = self._attention(qw, cache[0], cache[1], cross_mask, bias, position, p_bias, False, cached=True)
            return (o[0] if self.return_attention_scores else o), cache
        qw, kw, vw = self._projections(q, k, v, position, p_bias)
        kw, vw = _cache_layout(kw, vw, one_token=cache is not None and kw.shape[1] == 1)
        if cache is not None:
            kw = ops.slice_update(cache[0], [0, 0, 0, index], ops.cast(kw, cache[0].dtype))
            vw = ops.slice_update(cache[1], [0, 0, 0, index], ops.cast(vw, cache[1].dtype))
        if cache is None or bias is None:
            o = self._attention(qw, kw, vw, None, bias, position, p_bias, False, cached=True)
            return (o[0] if self.return_attention_scores else o), (kw, vw)
        relative = p_bias in ("typical_relative", "t5_relative")  # [T, N, .]: cut with the keys

        def mix(qw, kw, vw, bias, *position_):
            mixed, _ = self._mix(qw, kw, vw, None, bias, position_[0] if relative else position, p_bias, False, True)
            return mixed

        operands = [(qw, None), (kw, -1), (vw, -1), (bias, -1)] + ([(position, 1)] if relative else [])
        mixed = gops.over_filled_slots(mix, index + ops.shape(qw)[1], operands)
        return self.o_dense(mixed), (kw, vw)

    def _attention(self, qw, kw, vw, key_mask, bias, position, p_bias, training, cached=False):
        """The attention of per-head q, k, v (``_projections``) -> [B, Lq, out_dim]
        (and the scores with ``return_attention_scores``); ``position``: the relative
        embeddings of ``p_bias`` 'typical_relative' or 't5_relative'; ``cached``: k and v are
        in a key/value cache's layouts (``_cache_layout``)."""
        mixed, a = self._mix(qw, kw, vw, key_mask, bias, position, p_bias, training, cached)
        o = self.o_dense(mixed)
        return [o, a] if self.return_attention_scores else o  # fused attention (a None) never returns them

    def _mix(self, qw, kw, vw, key_mask, bias, position, p_bias, training, cached):
        """``_attention`` before ``o_dense``: (the heads' outputs [B, Lq, heads * head_size],
        the scaled scores [B, heads, Lq, Lk], or None from fused attention)."""
        relative = ops.cast(position, qw.dtype) if p_bias == "typical_relative" else None
        keys, values = ("bhdk", "bhdk") if cached else ("bkhd", "bkhd")
        o = (
            self._fused_attention(qw, *(_step_layout(kw, vw) if cached else (kw, vw)), key_mask, bias)
            if relative is None and p_bias != "t5_relative" and self.fusable(bias, training)
            else None
        )
        if o is not None:
            shape = ops.shape(o)
            return ops.reshape(o, [shape[0], shape[1], self.heads * self.head_size]), None
        if p_bias == "t5_relative":
            # T5's scores are not scaled down: under mixed precision they are taken in float32,
            # where float16's rounding of the larger products would move the softmax by ~1e-2
            a = ops.einsum(f"bjhd,{keys}->bhjk", ops.cast(qw, "float32"), ops.cast(kw, "float32"))
        else:
            a = ops.einsum(f"bjhd,{keys}->bhjk", qw, kw)
        if relative is not None:  # Shaw et al.: q_j . r_jk added to the scores, sum_k p_jk r_jk to the output
            a = a + ops.einsum("bjhd,jkd->bhjk", qw, relative)
        if p_bias == "t5_relative":  # T5: a learned bias per head, [Lq, Lk, heads] -> [1, heads, Lq, Lk]
            a = a + ops.expand_dims(ops.transpose(ops.cast(position, a.dtype), (2, 0, 1)), 0)
        if self.attention_scale:
            a = a / self.key_size**0.5
        if bias is not None and len(bias.shape) == 3:  # [B|1, Lq, Lk], shared by the heads
            bias = ops.expand_dims(bias, 1)
        attention = self._normalize(a, key_mask, bias, training)
        o = ops.einsum(f"bhjk,{values}->bjhd", ops.cast(attention, vw.dtype), vw)
        if relative is not None:
            o = o + ops.einsum("bhjk,jkd->bjhd", attention, relative)
        shape = ops.shape(o)
        return ops.reshape(o, [shape[0], shape[1], self.heads * self.head_size]), a

    def fusable(self, bias, training):
        """Whether this call may run as cuDNN's fused attention (``_fused_attention``): on a
        device that has it (``fused_attention_device``), softmax normalisation, no attention
        dropout in this call, keys and values of one head size, no scores to return, and no
        additive (float) bias."""
        dropout = bool(training) and self.attention_dropout > 0
        return (
            self.normalization == "softmax"
            and not dropout
            and not self.return_attention_scores
            and self.key_size == self.head_size
            and (bias is None or bias.dtype == "bool")
            and fused_attention_device()
        )

    def _fused_attention(self, qw, kw, vw, key_mask, bias, implementation="cudnn"):
        """[B, Lq, heads, d] of ``jax.nn.dot_product_attention`` (cuDNN's fused attention), or
        None where it refuses this call when traced (a float32 call, a head size or length it
        does not take, an older GPU): the caller then spells the attention out. ``key_mask``
        [B, Lk] and the bool ``bias`` [B|1, Lq, Lk] become one boolean mask broadcast to
        [B, 1, Lq, Lk] (True = may attend): cuDNN takes no mask of length 1 on the query axis."""
        import jax

        mask = None
        if key_mask is not None:
            mask = ops.expand_dims(ops.expand_dims(ops.cast(key_mask, "bool"), 1), 1)
        if bias is not None:
            bias = ops.expand_dims(bias, 1)
            mask = bias if mask is None else ops.logical_and(mask, bias)
        if mask is not None:
            mask = ops.broadcast_to(mask, (ops.shape(qw)[0], 1, ops.shape(qw)[1], ops.shape(kw)[1]))
        scale = 1.0 / self.key_size**0.5 if self.attention_scale else 1.0
        try:
            return jax.nn.dot_product_attention(qw, kw, vw, mask=mask, scale=scale, implementation=implementation)
        except (ValueError, NotImplementedError, RuntimeError, TypeError):  # JAX's checks of what cuDNN takes
            return None

    def compute_output_shape(self, input_shape):
        q_shape, k_shape = input_shape[0], input_shape[1]
        o_shape = tuple(q_shape[:-1]) + (self.out_dim,)
        if self.return_attention_scores:
            return [o_shape, (q_shape[0], self.heads, q_shape[1], k_shape[1])]
        return o_shape

    def compute_mask(self, inputs, mask=None):
        mask = super().compute_mask(inputs, mask)
        return [mask, None] if self.return_attention_scores else mask

    def get_config(self):
        config = super().get_config()
        config.update(
            heads=self.heads,
            head_size=self.head_size,
            out_dim=self.out_dim,
            key_size=self.key_size,
            use_bias=self.use_bias,
            return_attention_scores=self.return_attention_scores,
        )
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class AttentionBias(keras.layers.Layer):
    """Builds the attention visibility mask of an application (bool, True =
    may attend), passed to the attention layers as their ``a_bias`` input.

    ``mode='lm'``: input token ids [B, L] -> causal mask [1, L, L].
    ``mode='unilm'``: input segment ids [B, L] -> UniLM mask [B, L, L].
    """

    def __init__(self, mode="lm", **kwargs):
        super().__init__(**kwargs)
        if mode not in ("lm", "unilm"):
            raise ValueError(f"AttentionBias {self.name!r}: mode must be 'lm' or 'unilm', got {mode!r}")
        self.mode = mode

    def build(self, input_shape):
        self.built = True

    def call(self, inputs):
        if self.mode == "lm":
            return gops.causal_attention_bias(ops.shape(inputs)[1])
        return gops.unilm_attention_bias(inputs)

    def compute_output_spec(self, inputs):
        batch = 1 if self.mode == "lm" else inputs.shape[0]
        return keras.KerasTensor((batch, inputs.shape[1], inputs.shape[1]), dtype="bool")

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        config = super().get_config()
        config.update(mode=self.mode)
        return config
