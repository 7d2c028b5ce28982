"""The SRU elementwise recurrence (DESIGN.md §3) with a hand-written gradient.

Only the cheap elementwise recurrence is sequential; everything that does not
depend on the running state is computed batched over all time steps, outside
the loops:

* forward: the loop carries ``c`` and computes only
  ``f_t = σ(U1_t + b_f + v_f⊙c_{t−1})`` and ``c_t = U0_t + (c_{t−1} − U0_t)⊙f_t``;
  ``r`` and ``h`` are then computed for all steps at once from ``c``;
* backward: the gradient that flows into ``c`` obeys the linear recurrence
  ``dc_{t−1} = (dc_t + a_t)⊙A_t + e_t`` whose coefficients are recomputed batched
  from the saved ``c``; the reverse-time loop only runs that recurrence.

Both loops are ``tf.function``-compiled scans, XLA-compiled
(``jit_compile=True``) when XLA works on this machine (probed once per dtype;
set ``GAU_KERAS_SRU_XLA=0`` to disable).  The bidirectional case runs in the same
loop: the backward direction is flipped in time before the scan.  For backward
the op keeps only ``c`` (plus references to its own inputs).

``sru_recurrence_autodiff`` is the same maths as a plain per-step
``tf.while_loop`` differentiated by TensorFlow's autodiff; it is the baseline
for the gradient tests and ``benchmarks/srupp_speed.py``.
"""
import functools
import os

import tensorflow as tf

__all__ = ["sru_recurrence", "sru_recurrence_autodiff"]

_USE_XLA = os.environ.get("GAU_KERAS_SRU_XLA", "1") != "0"


# ----------------------------------------------------------------------------
# argument checking and layout helpers
# ----------------------------------------------------------------------------

def _layout(U, x, weight_c, bias, bidirectional):
    """Static sizes (dirs, d, k) of a call; raises ValueError naming the argument."""
    dirs = 2 if bidirectional else 1
    if U.shape.rank != 3:
        raise ValueError(f"sru_recurrence: U must be [B, L, dirs*d*k], got shape {U.shape}")
    if x.shape.rank != 3:
        raise ValueError(f"sru_recurrence: x must be [B, L, d_in], got shape {x.shape}")
    n_c = weight_c.shape[-1]
    if weight_c.shape.rank != 1 or n_c is None or n_c % (2 * dirs):
        raise ValueError(f"sru_recurrence: weight_c must be [2*dirs*d] (dirs={dirs}), got shape {weight_c.shape}")
    if bias.shape != weight_c.shape:
        raise ValueError(f"sru_recurrence: bias shape {bias.shape} must equal weight_c shape {weight_c.shape}")
    d = n_c // (2 * dirs)
    width = U.shape[-1]
    if width is None or width % (dirs * d) or width // (dirs * d) not in (3, 4):
        raise ValueError(f"sru_recurrence: U's last dimension ({width}) must be dirs*d*k with "
                         f"dirs*d={dirs * d} (from weight_c) and k in (3, 4)")
    k = width // (dirs * d)
    if k == 3 and x.shape[-1] != dirs * d:
        raise ValueError(f"sru_recurrence: with k=3 x's last dimension ({x.shape[-1]}) must equal "
                         f"dirs*d={dirs * d}")
    return dirs, d, k


def _compute_dtype(dtype):
    """float16/bfloat16 are computed in float32; float32/float64 unchanged."""
    return tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype


def _flip_time(t, bidirectional):
    """[B, L, dirs, ...] → time-major [L, B, dirs, ...], direction 1 reversed in time."""
    t = tf.transpose(t, [1, 0] + list(range(2, t.shape.rank)))
    if bidirectional:
        t = tf.concat([t[:, :, :1], tf.reverse(t[:, :, 1:], axis=[0])], axis=2)
    return t


def _unflip_time(t, bidirectional):
    """Inverse of ``_flip_time``."""
    if bidirectional:
        t = tf.concat([t[:, :, :1], tf.reverse(t[:, :, 1:], axis=[0])], axis=2)
    return tf.transpose(t, [1, 0] + list(range(2, t.shape.rank)))


# ----------------------------------------------------------------------------
# the two compiled loops
# ----------------------------------------------------------------------------

def _forward_scan(u0, u1b, pad, v_f, c0):
    """c_t for all t.  u0, u1b: [L, B, dirs, d]; pad: [L, B, dirs, 1] bool;
    v_f: [dirs, d]; c0: [B, dirs, d]  →  c: [L, B, dirs, d]."""
    def step(c_prev, inputs):
        u0_t, u1_t, pad_t = inputs
        f = tf.sigmoid(u1_t + v_f * c_prev)
        c = u0_t + (c_prev - u0_t) * f
        return tf.where(pad_t, c_prev, c)
    return tf.scan(step, (u0, u1b, pad), initializer=c0)


def _backward_scan(a, A, e, dc_last):
    """Reverse-time gradient into c.  a, A, e: [L, B, dirs, d]; dc_last: [B, dirs, d]
    → (D: [L, B, dirs, d] total gradient into each c_t, dc0: [B, dirs, d])."""
    def step(state, inputs):
        carry = state[1]
        a_t, A_t, e_t = inputs
        total = carry + a_t
        return total, total * A_t + e_t
    D, carries = tf.scan(step, (a, A, e), initializer=(dc_last, dc_last), reverse=True)
    return D, carries[0]


@functools.lru_cache(maxsize=None)
def _loops(dtype_name):
    """(forward, backward) compiled for one compute dtype: XLA when it works here."""
    if _USE_XLA:
        fwd = tf.function(_forward_scan, jit_compile=True, reduce_retracing=True)
        bwd = tf.function(_backward_scan, jit_compile=True, reduce_retracing=True)
        try:
            with tf.init_scope():  # probe eagerly, even when first called while tracing
                z = tf.zeros([2, 1, 1, 2], dtype_name)
                fwd(z, z, tf.zeros([2, 1, 1, 1], tf.bool), z[0, 0], z[0])
                bwd(z, z, z, z[0])
            return fwd, bwd
        except (tf.errors.OpError, NotImplementedError, ValueError):
            pass
    return (tf.function(_forward_scan, reduce_retracing=True),
            tf.function(_backward_scan, reduce_retracing=True))


# ----------------------------------------------------------------------------
# the op
# ----------------------------------------------------------------------------

def _split_inputs(U, x, weight_c, bias, scale_x, B, L, dirs, d, k):
    """U slices, skip term x' and the per-direction weights as [B, L, dirs, d] / [dirs, d]."""
    Uk = tf.reshape(U, [B, L, dirs, d, k])
    u0, u1, u2 = Uk[..., 0], Uk[..., 1], Uk[..., 2]
    xp = Uk[..., 3] if k == 4 else tf.reshape(x, [B, L, dirs, d]) * scale_x
    v_f, v_r = tf.unstack(tf.reshape(weight_c, [2, dirs, d]))
    b_f, b_r = tf.unstack(tf.reshape(bias, [2, dirs, d]))
    return u0, u1, u2, xp, v_f, v_r, b_f, b_r


def _previous_c(c_seq, c0):
    """[L, B, dirs, d] time-major c → c_{t−1} in the same (flipped) layout."""
    return tf.concat([c0[None], c_seq[:-1]], axis=0)


def _core(U, x, weight_c, bias, c0, pad, scale_x, mask_c, bidirectional):
    """Differentiable in U, x, weight_c, bias, c0, scale_x; all in one compute dtype.
    pad: [B, L] bool; mask_c: [B, dirs*d] or None."""
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    dirs, d, k = _layout(U, x, weight_c, bias, bidirectional)
    fwd_loop, bwd_loop = _loops(U.dtype.name)
    pad4 = pad[:, :, None, None]
    pad_t = _flip_time(tf.broadcast_to(pad4, tf.stack([B, L, dirs, 1])), bidirectional)
    m = 1.0 if mask_c is None else tf.reshape(mask_c, [B, 1, dirs, d])

    @tf.custom_gradient
    def op(U, x, weight_c, bias, c0, scale_x):
        # Nothing inside is recorded by autodiff (the gradient is ``grad``), which
        # also keeps XLA from exporting loop intermediates for a tape.
        U, x, weight_c, bias, c0, scale_x = [tf.stop_gradient(t) for t in (U, x, weight_c, bias, c0, scale_x)]
        u0, u1, u2, xp, v_f, v_r, b_f, b_r = _split_inputs(U, x, weight_c, bias, scale_x, B, L, dirs, d, k)
        c0_ = tf.reshape(c0, [B, dirs, d])
        c_seq = fwd_loop(_flip_time(u0, bidirectional), _flip_time(u1 + b_f, bidirectional),
                         pad_t, v_f, c0_)
        c = _unflip_time(c_seq, bidirectional)
        c_prev = _unflip_time(_previous_c(c_seq, c0_), bidirectional)
        r = tf.sigmoid(u2 + b_r + v_r * c_prev)
        h = tf.where(pad4, tf.zeros_like(xp), xp + (c - xp) * m * r)
        c_last = tf.reshape(c_seq[-1], [B, dirs * d])

        def grad(dh, dc_last):
            dc_last = tf.zeros_like(c_last) if dc_last is None else dc_last
            u0, u1, u2, xp, v_f, v_r, b_f, b_r = _split_inputs(U, x, weight_c, bias, scale_x,
                                                               B, L, dirs, d, k)
            keep = tf.cast(tf.logical_not(pad4), c_seq.dtype)
            c = _unflip_time(c_seq, bidirectional)
            c_prev = _unflip_time(_previous_c(c_seq, c0_), bidirectional)
            f = tf.sigmoid(u1 + b_f + v_f * c_prev)
            r = tf.sigmoid(u2 + b_r + v_r * c_prev)
            dh4 = tf.reshape(dh, [B, L, dirs, d]) * keep
            mr = m * r
            dgr = dh4 * (c - xp) * mr * (1.0 - r)
            g = (c_prev - u0) * f * (1.0 - f) * keep
            A = tf.where(pad4, tf.ones_like(f), f + g * v_f)
            D_t, dc0 = bwd_loop(_flip_time(dh4 * mr, bidirectional), _flip_time(A, bidirectional),
                                _flip_time(dgr * v_r, bidirectional),
                                tf.reshape(dc_last, [B, dirs, d]))
            D = _unflip_time(D_t, bidirectional)
            dgf = D * g
            dxp = dh4 * (1.0 - mr)
            parts = [D * (1.0 - f) * keep, dgf, dgr] + ([dxp] if k == 4 else [])
            dU = tf.reshape(tf.stack(parts, axis=-1), tf.shape(U))
            if k == 3:
                dx = tf.reshape(dxp * scale_x, tf.shape(x))
                dscale = tf.reduce_sum(dxp * tf.reshape(x, [B, L, dirs, d]))
            else:
                dx, dscale = tf.zeros_like(x), tf.zeros_like(scale_x)
            dweight_c = tf.reshape(tf.stack([tf.reduce_sum(dgf * c_prev, [0, 1]),
                                             tf.reduce_sum(dgr * c_prev, [0, 1])]), tf.shape(weight_c))
            dbias = tf.reshape(tf.stack([tf.reduce_sum(dgf, [0, 1]), tf.reduce_sum(dgr, [0, 1])]),
                               tf.shape(bias))
            return dU, dx, dweight_c, dbias, tf.reshape(dc0, tf.shape(c0)), dscale

        return (tf.reshape(h, [B, L, dirs * d]), c_last), grad

    return op(U, x, weight_c, bias, c0, scale_x)


def _prepare(U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional):
    """Convert arguments to tensors in the compute dtype; defaults for the optional ones."""
    U = tf.convert_to_tensor(U)
    out_dtype = U.dtype
    if not out_dtype.is_floating:
        raise TypeError(f"sru_recurrence: U must be floating point, got {out_dtype.name}")
    dtype = _compute_dtype(out_dtype)
    cast = lambda t: tf.cast(tf.convert_to_tensor(t, dtype_hint=dtype), dtype)  # noqa: E731
    U, x, weight_c, bias = cast(U), cast(x), cast(weight_c), cast(bias)
    dirs, d, _ = _layout(U, x, weight_c, bias, bidirectional)
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    c0 = tf.zeros(tf.stack([B, dirs * d]), dtype) if c0 is None else cast(c0)
    if mask_pad is None:
        pad = tf.zeros(tf.stack([B, L]), tf.bool)
    else:
        pad = tf.convert_to_tensor(mask_pad)
        if pad.shape.rank != 2:
            raise ValueError(f"sru_recurrence: mask_pad must be [B, L] (True = padding), got shape {pad.shape}")
        pad = tf.cast(pad, tf.bool)
    scale = cast(1.0 if scale_x is None else scale_x)
    if scale.shape.rank != 0:
        raise ValueError(f"sru_recurrence: scale_x must be a scalar, got shape {scale.shape}")
    mask_c = None if dropout_mask is None else cast(dropout_mask)
    return U, x, weight_c, bias, c0, pad, scale, mask_c, out_dtype


def sru_recurrence(U, x, weight_c, bias, c0=None, mask_pad=None, scale_x=None,
                   dropout_mask=None, bidirectional=False):
    """The SRU elementwise recurrence with a fused custom gradient.

    Args:
        U: [B, L, dirs·d·k], k = 3 or 4, the k values of one hidden unit adjacent;
            directions laid out [dir0 block | dir1 block].
        x: [B, L, d_in]; the skip term (times ``scale_x``) when k = 3, where d_in
            must be dirs·d (forward skip x[..., :d], backward skip x[..., d:]).
        weight_c, bias: [2·dirs·d], laid out [2, dirs, d] (forget then reset).
        c0: [B, dirs·d] initial state, zeros when None.
        mask_pad: [B, L] bool, True = padding (state carried, output 0).
        scale_x: scalar multiplying the k = 3 skip term (1 when None).
        dropout_mask: [B, dirs·d] multiplier on c in h (1 when None); no gradient.
        bidirectional: the second direction runs t = L−1 … 0.

    Returns:
        (h [B, L, dirs·d], c_last [B, dirs·d]) in U's dtype; float16/bfloat16
        are computed in float32, float64 in float64.
    """
    U, x, weight_c, bias, c0, pad, scale, mask_c, out_dtype = _prepare(
        U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional)
    h, c_last = _core(U, x, weight_c, bias, c0, pad, scale, mask_c, bidirectional)
    return tf.cast(h, out_dtype), tf.cast(c_last, out_dtype)


def sru_recurrence_autodiff(U, x, weight_c, bias, c0=None, mask_pad=None, scale_x=None,
                            dropout_mask=None, bidirectional=False):
    """Same contract as ``sru_recurrence``, written as one plain ``tf.while_loop``
    over time (all gates inside the loop, every direction stepped explicitly) and
    differentiated by TensorFlow's autodiff.  Slow and memory-hungry on purpose:
    it is the reference for tests and the baseline for benchmarks."""
    U, x, weight_c, bias, c0, pad, scale, mask_c, out_dtype = _prepare(
        U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional)
    dirs, d, k = _layout(U, x, weight_c, bias, bidirectional)
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    Uk = tf.reshape(U, [B, L, dirs, d, k])
    xp = Uk[..., 3] if k == 4 else tf.reshape(x, [B, L, dirs, d]) * scale
    w = tf.reshape(weight_c, [2, dirs, d])
    b = tf.reshape(bias, [2, dirs, d])
    m = tf.ones([B, dirs, d], U.dtype) if mask_c is None else tf.reshape(mask_c, [B, dirs, d])
    hs, cs_last = [], []
    for di in range(dirs):
        def body(i, c_prev, h_acc, di=di):
            t = i if di == 0 else L - 1 - i
            u = Uk[:, t, di]
            f = tf.sigmoid(u[..., 1] + w[0, di] * c_prev + b[0, di])
            r = tf.sigmoid(u[..., 2] + w[1, di] * c_prev + b[1, di])
            c = u[..., 0] + (c_prev - u[..., 0]) * f
            h = xp[:, t, di] + (c - xp[:, t, di]) * m[:, di] * r
            p = pad[:, t, None]
            return i + 1, tf.where(p, c_prev, c), h_acc.write(t, tf.where(p, tf.zeros_like(h), h))

        _, c_last, h_acc = tf.while_loop(
            lambda i, *_: i < L, body,
            (tf.constant(0), tf.reshape(c0, [B, dirs, d])[:, di], tf.TensorArray(U.dtype, size=L)))
        hs.append(tf.transpose(h_acc.stack(), [1, 0, 2]))
        cs_last.append(c_last)
    h = tf.concat(hs, axis=-1)
    return tf.cast(h, out_dtype), tf.cast(tf.concat(cs_last, axis=-1), out_dtype)
