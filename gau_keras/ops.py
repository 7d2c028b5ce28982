"""Pure tensor functions shared by the layers (``keras.ops``; TensorFlow itself only to
ask which devices it has, ``matmul``).

Shapes use B = batch, L = sequence length, Lq/Lk = query/key lengths,
d = feature size.

Design notes: docs/models.md.
"""

import math

import keras
from keras import ops

ATTENTION_NORMALIZATIONS = ("softmax", "softmax_plus", "squared_relu")

#: the value masked logits get, everywhere in gau_keras (attention, heads, losses):
#: finite, so that a row with every entry masked stays a number, and far below any real
#: logit, so that softmax gives it exactly 0 in float32 (bert4keras's -infinity() is 1e12 too)
NEG_INF = -1e12


def masked_fill(x, keep, value=NEG_INF):
    """``x`` where ``keep`` (a bool tensor broadcastable to ``x``), ``value`` elsewhere."""
    return ops.where(ops.cast(keep, "bool"), x, ops.cast(value, x.dtype))


def key_mask_from_token_ids(token_ids):
    """bert4keras's padding mask: ``token_ids != 0`` with position 0 always kept.

    Keeping position 0 guarantees that no attention row has every key masked.

    Args:
        token_ids: int tensor [B, L].
    Returns:
        bool tensor [B, L].
    """
    mask = ops.not_equal(token_ids, 0)
    first = ops.ones_like(mask[:, :1], dtype="bool")
    return ops.concatenate([first, mask[:, 1:]], axis=1)


def align(tensor, axes, ndim):
    """Inserts singleton axes so that ``tensor``'s axes land on ``axes`` of an
    ``ndim``-rank tensor (e.g. a [B, L] mask onto axes [0, 2] of [B, L, L])."""
    axes = [a if a >= 0 else a + ndim for a in axes]
    if len(axes) != len(tensor.shape):
        raise ValueError(f"align: tensor of rank {len(tensor.shape)} cannot be aligned to axes {axes}")
    shape = ops.shape(tensor)
    target = [shape[axes.index(dst)] if dst in axes else 1 for dst in range(ndim)]
    return ops.reshape(tensor, target)


def concrete(x):
    """x as a numpy array when it has values (eager), None when it is traced or symbolic."""
    import numpy as np

    try:
        return np.asarray(ops.convert_to_numpy(x))
    except Exception:
        return None


def check_mask(mask, x, axes, owner):
    """A ValueError naming ``owner`` when the [B, L] ``mask`` cannot mask ``x`` on ``axes``:
    another rank, batch or length, where the shapes are known."""
    if len(mask.shape) != 2:
        raise ValueError(f"{owner}: the mask must be [batch, length], got shape {tuple(mask.shape)}")
    pairs = [(0, "batch", 0)] + [(1, f"length (axis {a} of x)", a) for a in axes]
    for mask_axis, what, x_axis in pairs:
        m, n = mask.shape[mask_axis], x.shape[x_axis]
        if mask_axis == 0 and m == 1:
            continue  # one mask for the whole batch broadcasts
        if isinstance(m, int) and isinstance(n, int) and m != n:
            raise ValueError(
                f"{owner}: the mask's {what} is {m} where x has {n}; shapes {tuple(mask.shape)} and {tuple(x.shape)}"
            )


def sequence_masking(x, mask=None, value=NEG_INF, axis=1):
    """Replaces the entries of ``x`` at masked positions with ``value``.

    Args:
        x: tensor [B, ..., L, ...].
        mask: bool tensor [B, L] (True = keep) or None.
        value: the fill value (``NEG_INF``, 0, ...).
        axis: the axis of ``x`` that ``mask``'s second axis refers to.
    """
    if mask is None:
        return x
    check_mask(mask, x, [axis % len(x.shape)], "sequence_masking")
    return masked_fill(x, align(ops.cast(mask, "bool"), [0, axis], len(x.shape)), value)


def attention_normalize(a, mask=None, method="softmax", bias=None, min_len=16):
    """Normalises attention logits over the key axis (the last one).

    Args:
        a: logits [B, Lq, Lk] (or [B, H, Lq, Lk]).
        mask: bool key mask [B, Lk] (True = real token) or None.
        method: 'softmax'; 'softmax_plus' = softmax(a * ln(n) / ln(512)); or
            'squared_relu' = relu(a)**2 / n; n = the number of keys a query
            may attend to (unmasked, and visible under a bool ``bias``),
            floored at ``min_len`` for 'softmax_plus'.
        bias: broadcastable to ``a``: bool = a visibility mask (LM/UniLM;
            combined with ``mask`` and counted in n, as bert4keras >= 0.11.5
            does), float = an additive bias; or None.
        min_len: the floor of n for 'softmax_plus' (16 in bert4keras >= 0.11.5,
            1 in the version the released GAU-alpha was trained with).
    Returns:
        attention weights, same shape and dtype as ``a`` (computed in float32).
    """
    if method not in ATTENTION_NORMALIZATIONS:
        raise ValueError(f"attention_normalize: unknown method {method!r}; expected one of {ATTENTION_NORMALIZATIONS}")
    dtype = a.dtype
    a = ops.cast(a, "float32")  # float16 logits lose the small differences softmax amplifies
    allowed = None
    if mask is not None:
        allowed = align(ops.cast(mask, "bool"), [0, len(a.shape) - 1], len(a.shape))
    if bias is not None and bias.dtype == "bool":
        allowed = bias if allowed is None else ops.logical_and(allowed, bias)
    elif bias is not None:
        a = a + ops.cast(bias, a.dtype)
    if method == "softmax":
        return masked_softmax(a, allowed, dtype)
    n = _key_count(a, allowed)
    if method == "squared_relu":
        return ops.cast(ops.square(ops.relu(_masked(a, allowed))) / n, dtype)
    n = ops.maximum(n, ops.cast(min_len, n.dtype))
    # scaled before masking: with n = 1 the scale is 0, which would lift masked keys to 0
    return masked_softmax(a * ops.log(n) / math.log(512.0), allowed, dtype)


def masked_softmax(a, allowed=None, dtype="float32"):
    """Softmax of float32 logits (float64 ones stay float64) over the last axis, masked
    entries (``allowed`` False, a bool tensor broadcastable to ``a``) set to NEG_INF first;
    the result in ``dtype``. The one masked attention softmax of the package (the attention
    layers through ``attention_normalize``, SRU++'s attention directly).

    Its gradient is computed from that result alone, ``p (g - Σ g p)`` in float32:
    the backward pass keeps one [.., Lq, Lk] tensor in ``dtype`` (bfloat16 under
    mixed precision) and ``allowed`` as given, where autodiff keeps the masked logits
    and their exponentials in float32 and the mask broadcast to [.., Lq, Lk]. Masked
    entries get a zero gradient, as through ``where``.
    """
    compute = "float64" if keras.backend.standardize_dtype(a.dtype) == "float64" else "float32"
    a = ops.cast(a, compute)
    if allowed is None:
        return _softmax_from_output(a, dtype)
    return _masked_softmax_from_output(a, ops.cast(allowed, "bool"), dtype)


def _softmax_from_output(a, dtype):
    compute = keras.backend.standardize_dtype(a.dtype)  # float32, or float64 as given

    # the tensors a custom gradient uses are its arguments: a closure over a traced value
    # leaks it under jax.checkpoint (recompute)
    @ops.custom_gradient
    def softmax(logits):
        p = ops.cast(ops.softmax(logits, axis=-1), dtype)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            p32, g = ops.cast(p, compute), ops.cast(upstream, compute)
            return p32 * (g - ops.sum(g * p32, axis=-1, keepdims=True))

        return p, grad

    return softmax(a)


def _masked_softmax_from_output(a, allowed, dtype):
    compute = keras.backend.standardize_dtype(a.dtype)  # float32, or float64 as given

    @ops.custom_gradient
    def softmax(logits, allowed):
        p = ops.cast(ops.softmax(masked_fill(logits, allowed), axis=-1), dtype)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            p32, g = ops.cast(p, compute), ops.cast(upstream, compute)
            # masked entries: 0, also in a row with every key masked (p uniform there)
            return masked_fill(p32 * (g - ops.sum(g * p32, axis=-1, keepdims=True)), allowed, 0.0), None

        return p, grad

    return softmax(a, allowed)


def rms_normalize(x, epsilon):
    """``x / sqrt(mean(x², -1) + epsilon)`` over the last axis of x [..., d], in x's dtype.

    Reverse-mode only on JAX (a ``custom_vjp``: ``jax.jvp`` / ``jacfwd`` / ``hessian`` refuse
    it), as ``masked_softmax``; Keras trains with reverse mode, and gradients of gradients work.

    The statistic and the product are taken in float32 (float16 squares overflow for
    |x| > 256) and y rounded once to x's dtype. A product in bfloat16 would round the
    factor r to bfloat16 first: an error of up to 2^-9 on the scale of a whole row, which
    the next layer's products do not average out (the bundled GAU-alpha's bf16 MLM
    probabilities were ~30% further from float32's on average with it, on both backends;
    issue 51). The backward pass keeps x as it came and the float32 [..., 1] factor r
    instead of a float32 copy of x (``_unshared`` says how). Gradient:
    ``r (g - y mean(g y))`` with y = x r, in float32.
    """

    @ops.custom_gradient
    def normalize(x):
        x32 = ops.cast(x, "float32")
        r = ops.rsqrt(ops.mean(ops.square(x32), axis=-1, keepdims=True) + epsilon)
        y = ops.cast(x32 * _unshared(r), x.dtype)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            g, y32 = ops.cast(upstream, "float32"), ops.cast(x, "float32") * r
            return ops.cast(r * (g - y32 * ops.mean(g * y32, axis=-1, keepdims=True)), x.dtype)

        return y, grad

    return normalize(x)


def _unshared(r):
    """r [..., 1] (float32) again, exactly (``r_b + (r - r_b)`` with r_b = r rounded to
    bfloat16: the difference is exact), as a value that XLA does not merge with r.

    The forward product x·r and the backward pass's x·r would otherwise be one
    instruction to XLA (common subexpressions): the forward's float32 product, kept
    for the backward pass, is a float32 [..., d] copy of every normed tensor (CPU
    proxy, 4 GAU layers bf16 at 8x512: XLA temp 758 -> 806 MiB, bytes 7.86 -> 8.17 GB;
    with this copy of r, 758 MiB and 7.86 GB, as with the bfloat16 product). A
    backward pass written without x·r instead kept the memory but read and wrote 4%
    more bytes.
    """
    r_b = ops.cast(ops.cast(r, "bfloat16"), "float32")
    return r_b + (r - r_b)


def matmul(a, b):
    """``ops.matmul(a, b)`` rounded to nearest in a's dtype: a [..., M, K] with b [K, N],
    or b [..., K, N] with a's batch axes; b is cast to a's dtype.

    TensorFlow's bfloat16 MatMul kernel off GPUs and TPUs truncates its float32 sums to
    bfloat16 (measured, TF 2.21 on a CPU: every result rounded towards zero, -0.28% on
    average, where rounding to nearest is unbiased), a bias that every layer adds to the
    next; its einsum sums in bfloat16 (0.9% relative error over 64 terms). There the
    product is taken in float32 and rounded once, with a gradient that keeps a and b as
    given (not float32 copies) and is computed in float32 too. Elsewhere (JAX, TensorFlow
    on a GPU or TPU, float16, float32) this is ``ops.matmul``.
    """
    if not bfloat16_matmul_truncates(a):
        return ops.matmul(a, b)
    return _rounded_matmul(a, ops.cast(b, a.dtype))


def bfloat16_matmul_truncates(a):
    """Whether ``ops.matmul`` of a bfloat16 ``a`` runs TensorFlow's truncating CPU kernel."""
    if keras.backend.backend() != "tensorflow" or keras.backend.standardize_dtype(a.dtype) != "bfloat16":
        return False
    import tensorflow as tf

    return not (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))


def _rounded_matmul(a, b):
    @ops.custom_gradient
    def product(a, b):
        y = ops.cast(ops.matmul(ops.cast(a, "float32"), ops.cast(b, "float32")), a.dtype)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            g, a32, b32 = (ops.cast(t, "float32") for t in (upstream, a, b))
            da = ops.matmul(g, ops.swapaxes(b32, -1, -2))
            if len(b.shape) == 2:  # summed over a's batch axes
                a32, g = ops.reshape(a32, (-1, ops.shape(a32)[-1])), ops.reshape(g, (-1, ops.shape(g)[-1]))
            db = ops.matmul(ops.swapaxes(a32, -1, -2), g)
            return ops.cast(da, a.dtype), ops.cast(db, b.dtype)

        return y, grad

    return product(a, b)


def _masked(a, allowed, value=NEG_INF):
    if allowed is None:
        return a
    return masked_fill(a, allowed, value)


def _key_count(a, allowed):
    """Keys each query may attend to, broadcastable to ``a`` ([.., Lq, 1])."""
    if allowed is None:
        return ops.cast(ops.shape(a)[-1], a.dtype)
    allowed = ops.broadcast_to(allowed, ops.shape(a))
    return ops.sum(ops.cast(allowed, a.dtype), axis=-1, keepdims=True)


def causal_attention_bias(length):
    """LM visibility mask, bool [1, L, L]: key j visible to query i iff j <= i."""
    idx = ops.arange(length)
    return ops.expand_dims(ops.less_equal(idx[None, :], idx[:, None]), 0)


def unilm_attention_bias(segment_ids):
    """UniLM visibility mask, bool [B, L, L]: with c = cumsum(segment_ids), key
    j is visible to query i iff c[j] <= c[i]."""
    c = ops.cumsum(ops.cast(segment_ids, "int32"), axis=1)
    return ops.less_equal(c[:, None, :], c[:, :, None])


def sinusoidal_embeddings(positions, dim, base=10000.0):
    """Interleaved sinusoidal embeddings [sin θ0, cos θ0, sin θ1, cos θ1, ...].

    Args:
        positions: float tensor of any shape [...].
        dim: even embedding size.
    Returns:
        tensor [..., dim] with θ_i = position * base**(-2i/dim).
    """
    if dim % 2:
        raise ValueError(f"sinusoidal_embeddings: dim must be even, got {dim}")
    positions = ops.cast(positions, "float32")
    indices = ops.arange(0, dim // 2, dtype="float32")
    freqs = ops.power(base, -2.0 * indices / dim)
    theta = ops.expand_dims(positions, -1) * freqs
    emb = ops.stack([ops.sin(theta), ops.cos(theta)], axis=-1)
    shape = ops.shape(emb)
    return ops.reshape(emb, [shape[i] for i in range(len(emb.shape) - 2)] + [dim])


def apply_rotary(sinusoidal, x):
    """Applies RoPE with the interleaved layout to ``x``.

    Args:
        sinusoidal: [1 or B, L, d] interleaved [sin, cos, ...] embeddings.
        x: [B, L, d] or [B, L, H, d].
    Returns:
        ``x * cos + rotate(x) * sin`` with rotate(x) = interleave(-x[1::2], x[::2]),
        computed pair by pair from the [.., d/2] halves of ``sinusoidal``: no
        [.., d] cos/sin table is expanded for each tensor rotated.
    """
    sinusoidal = ops.cast(sinusoidal, x.dtype)
    if len(x.shape) == 4:
        sinusoidal = ops.expand_dims(sinusoidal, 2)
    sin, cos = sinusoidal[..., ::2], sinusoidal[..., 1::2]
    even, odd = x[..., ::2], x[..., 1::2]
    rotated = ops.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
    return ops.reshape(rotated, ops.shape(x))


def key_lengths(slots, smallest=64, most=16):
    """The key lengths a cached decoding step may attend over (``over_filled_slots``): multiples
    of one block (at least ``smallest``, a multiple of 16 or of ``smallest``, at most ``most`` of them) up to
    ``slots``, then ``slots`` itself; only ``slots`` under ``8 * smallest`` slots, where a cut
    saves less than the branches cost to compile (each length is one compiled branch per layer:
    on TensorFlow, XLA's compilation of a GPT-2 small's loop at 1040 slots takes 45 s more)."""
    if slots < 8 * smallest:
        return (slots,)
    granule = min(16, smallest)
    block = -(-max(smallest, -(-slots // most)) // granule) * granule
    return tuple(range(block, slots, block)) + (slots,)


def over_filled_slots(attend, filled, operands):
    """``attend(*tensors)`` over the key slots that hold something, not the whole cache.

    A cached step's attention reads every key and value slot of its cache, the unfilled ones
    masked: at a long buffer that read, not the arithmetic, is the step's cost on a CPU. Here the
    key axes are cut to the shortest of ``key_lengths`` that holds ``filled`` slots, chosen at
    run time among branches compiled once each (``ops.switch``); the slots cut off are the
    masked ones, so the result is the uncut call's (up to the order of summation).

    Args:
        attend: a function of the tensors, the same output shapes whatever the key length.
        filled: int scalar (tensor): slots ``>= filled`` are unfilled (masked in every operand).
        operands: ``(tensor, key_axis)`` pairs; ``key_axis`` None for a tensor without one
            (queries). The first tensor with a key axis gives the number of slots.
    """
    tensors = [tensor for tensor, _ in operands]
    axes = [axis for _, axis in operands]
    slots = next(tensor.shape[axis] for tensor, axis in operands if axis is not None)
    lengths = key_lengths(slots)
    if len(lengths) == 1:
        return attend(*tensors)

    def prefix(x, axis, length):
        return x if axis is None else x[(slice(None),) * (axis % len(x.shape)) + (slice(0, length),)]

    def cut(length):
        return lambda *xs: attend(*[prefix(x, axis, length) for x, axis in zip(xs, axes)])

    shorter = ops.less(ops.convert_to_tensor(lengths[:-1], "int32"), ops.cast(filled, "int32"))
    return ops.switch(ops.sum(ops.cast(shorter, "int32")), [cut(length) for length in lengths], *tensors)
