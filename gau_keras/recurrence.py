"""The SRU elementwise recurrence (DESIGN.md §3) with a hand-written gradient.

The matrix work that produces U stays outside (batched over all steps); here
only the elementwise recurrence runs, as two loops over time:

* forward: the loop carries c and computes only f_t and c_t; r and h are then
  computed for all steps at once.  Only c [L, B, dirs, d] is kept for the
  backward pass (the op's own inputs are referenced, not copied);
* backward (``tf.custom_gradient``): one reverse-time loop that recomputes f
  and r per step from the saved c and writes dU, dx, dweight_c, dbias and dc0
  directly (no per-step temporaries stored over the whole sequence; under XLA
  dU and dx are written in place into their batch-major buffers).

Autodiff through a ``tf.while_loop`` instead stores every intermediate of every
step.  Both loops are ``tf.function``s compiled by XLA (``jit_compile=True``)
when XLA works on this machine (probed once per dtype and direction count; set
``GAU_KERAS_SRU_XLA=0`` to disable), else plain graph loops.  Both directions
of a bidirectional layer advance in the same loop (direction 1 is reversed in
time before the loop).  float16/bfloat16 are computed in float32, float64 stays float64.

``sru_recurrence_autodiff`` is the same maths written the straightforward way
and differentiated by autodiff: the reference for the tests and the baseline
for ``benchmarks/srupp_speed.py``.
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
    """Batch-major [B, L, dirs, ...] → scan order [L, B, dirs, ...] (direction 1 reversed in time)."""
    t = tf.transpose(t, [1, 0] + list(range(2, t.shape.rank)))
    if bidirectional:
        t = tf.concat([t[:, :, :1], tf.reverse(t[:, :, 1:], axis=[0])], axis=2)
    return t


def _unflip_time(t, bidirectional):
    """Scan order [L, B, dirs, ...] (direction 1 reversed in time) → batch-major [B, L, dirs, ...]."""
    if bidirectional:
        t = tf.concat([t[:, :, :1], tf.reverse(t[:, :, 1:], axis=[0])], axis=2)
    return tf.transpose(t, [1, 0] + list(range(2, t.shape.rank)))


# ----------------------------------------------------------------------------
# forward and backward (each compiled as one function)
# ----------------------------------------------------------------------------

def _parts(U, x, weight_c, bias, scale_x, bidirectional):
    """U as [B, L, dirs, d, k]; the skip term x' as [B, L, dirs, d]; weights as [dirs, d]."""
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    dirs, d, k = _layout(U, x, weight_c, bias, bidirectional)
    Uk = tf.reshape(U, [B, L, dirs, d, k])
    xp = Uk[..., 3] if k == 4 else tf.reshape(x, [B, L, dirs, d]) * scale_x
    v_f, v_r = tf.unstack(tf.reshape(weight_c, [2, dirs, d]))
    b_f, b_r = tf.unstack(tf.reshape(bias, [2, dirs, d]))
    return Uk, xp, v_f, v_r, b_f, b_r


def _states(c_seq, c0, bidirectional):
    """Saved scan-order c → (c_t, c_{t−1}) batch-major [B, L, dirs, d]."""
    c_prev = tf.concat([c0[None], c_seq[:-1]], axis=0)
    return _unflip_time(c_seq, bidirectional), _unflip_time(c_prev, bidirectional)


def _forward(U, x, weight_c, bias, c0, pad, scale_x, mask_c, bidirectional):
    """→ h [B, L, dirs·d], c_last [B, dirs·d], c_seq [L, B, dirs, d] (scan order:
    direction 1 flipped in time), the only tensor kept for the backward pass.
    The loop carries c and computes only f and c; r and h follow batched."""
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    Uk, xp, v_f, v_r, b_f, b_r = _parts(U, x, weight_c, bias, scale_x, bidirectional)
    u0, u1, u2 = Uk[..., 0], Uk[..., 1], Uk[..., 2]
    dirs, d = v_f.shape
    c0 = tf.reshape(c0, [B, dirs, d])
    pad4 = pad[:, :, None, None]
    pad_t = _flip_time(tf.broadcast_to(pad4, [B, L, dirs, 1]), bidirectional)

    def step(c_prev, inputs):
        u0_t, u1_t, pad_t = inputs
        f = tf.sigmoid(u1_t + v_f * c_prev)
        c = u0_t + (c_prev - u0_t) * f
        return tf.where(pad_t, c_prev, c)

    c_seq = tf.scan(step, (_flip_time(u0, bidirectional), _flip_time(u1 + b_f, bidirectional), pad_t),
                    initializer=c0)
    c, c_prev = _states(c_seq, c0, bidirectional)
    r = tf.sigmoid(u2 + b_r + v_r * c_prev)
    m = tf.reshape(mask_c, [B, 1, dirs, d])
    h = tf.where(pad4, tf.zeros_like(xp), xp + (c - xp) * m * r)
    return tf.reshape(h, [B, L, dirs * d]), tf.reshape(c_seq[-1], [B, dirs * d]), c_seq


def _reader(L, bidirectional):
    """read(T, t): step t of the scan from batch-major T [B, L, dirs, ...] →
    [B, dirs, ...]; direction 1 runs backwards, so it reads time L−1−t."""
    if not bidirectional:
        return lambda T, t: T[:, t]
    return lambda T, t: tf.stack([T[:, t, 0], T[:, L - 1 - t, 1]], axis=1)


def _gates(u, c_prev, v_f, v_r, b_f, b_r):
    """f_t, r_t and c_t for one step; u: [B, dirs, d, k], c_prev: [B, dirs, d]."""
    f = tf.sigmoid(u[..., 1] + b_f + v_f * c_prev)
    r = tf.sigmoid(u[..., 2] + b_r + v_r * c_prev)
    return f, r, u[..., 0] + (c_prev - u[..., 0]) * f


class _StepWriter:
    """Collects per-step values [B, dirs, ...] of a loop into a batch-major
    [B, L, dirs, ...] tensor.  Under XLA (``in_place``) a scatter into a
    loop-carried buffer, which XLA updates in place; otherwise a TensorArray
    (graph-mode scatter would copy the buffer every step) and one transpose."""

    def __init__(self, B, L, dirs, tail, dtype, bidirectional, in_place):
        self.L, self.dirs, self.bidirectional, self.in_place = L, dirs, bidirectional, in_place
        if in_place:
            self.init = tf.zeros(tf.concat([[B, L, dirs], tail], 0), dtype)
            self.batch = tf.range(B)[:, None]
        else:
            self.init = tf.TensorArray(dtype, size=L, element_shape=[None, dirs] + list(tail))

    def write(self, buf, t, value):
        if not self.in_place:
            return buf.write(t, value)
        times = [t, self.L - 1 - t][:self.dirs]
        index = tf.concat([tf.concat([self.batch, tf.fill(tf.shape(self.batch), tt),
                                      tf.fill(tf.shape(self.batch), di)], 1)
                           for di, tt in enumerate(times)], 0)
        return tf.tensor_scatter_nd_update(buf, index, tf.concat(tf.unstack(value, axis=1), 0))

    def result(self, buf):
        return buf if self.in_place else _unflip_time(buf.stack(), self.bidirectional)


def _backward(U, x, weight_c, bias, c0, pad, scale_x, mask_c, c_seq, dh, dc_last, bidirectional, in_place):
    """One reverse-time loop computing every gradient from the saved c_seq
    (DESIGN.md §3) → (dU, dx, dweight_c, dbias, dc0, dscale_x)."""
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    Uk, xp, v_f, v_r, b_f, b_r = _parts(U, x, weight_c, bias, scale_x, bidirectional)
    dirs, d = v_f.shape
    k = U.shape[-1] // (dirs * d)
    read = _reader(L, bidirectional)
    pad4, m = pad[:, :, None, None], tf.reshape(mask_c, [B, dirs, d])
    dh4, c_init = tf.reshape(dh, [B, L, dirs, d]), tf.reshape(c0, [B, dirs, d])
    du_out = _StepWriter(B, L, dirs, [d, k], U.dtype, bidirectional, in_place)
    dxp_out = _StepWriter(B, L, dirs, [d], U.dtype, bidirectional, in_place)

    def body(t, dc, dv_f, dv_r, db_f, db_r, du_buf, dxp_buf):
        c_prev = tf.where(t > 0, c_seq[tf.maximum(t - 1, 0)], c_init)
        f, r, _ = _gates(read(Uk, t), c_prev, v_f, v_r, b_f, b_r)
        u0, xp_t, pad_t = read(Uk, t)[..., 0], read(xp, t), read(pad4, t)
        keep = tf.cast(tf.logical_not(pad_t), dc.dtype)
        dh_t = read(dh4, t) * keep  # h = 0 on padding
        mr = m * r
        total = dc + dh_t * mr
        dgr = dh_t * (c_seq[t] - xp_t) * mr * (1.0 - r)
        dgf = total * (c_prev - u0) * f * (1.0 - f) * keep
        dxp = dh_t * (1.0 - mr)
        du = [total * (1.0 - f) * keep, dgf, dgr] + ([dxp] if k == 4 else [])
        dc = tf.where(pad_t, total, total * f + dgf * v_f + dgr * v_r)  # padding passes dc through
        return (t - 1, dc, dv_f + tf.reduce_sum(dgf * c_prev, 0), dv_r + tf.reduce_sum(dgr * c_prev, 0),
                db_f + tf.reduce_sum(dgf, 0), db_r + tf.reduce_sum(dgr, 0),
                du_out.write(du_buf, t, tf.stack(du, axis=-1)),
                dxp_out.write(dxp_buf, t, dxp) if k == 3 else dxp_buf)

    zeros = tf.zeros([dirs, d], U.dtype)
    _, dc0, dv_f, dv_r, db_f, db_r, du_buf, dxp_buf = tf.while_loop(
        lambda t, *_: t >= 0, body,
        (L - 1, tf.reshape(dc_last, [B, dirs, d]), zeros, zeros, zeros, zeros, du_out.init,
         dxp_out.init if k == 3 else tf.zeros([0], U.dtype)))
    dU = tf.reshape(du_out.result(du_buf), tf.shape(U))
    if k == 3:
        dxp = dxp_out.result(dxp_buf)
        dx = tf.reshape(dxp * scale_x, tf.shape(x))
        dscale = tf.reduce_sum(dxp * tf.reshape(x, [B, L, dirs, d]))
    else:
        dx, dscale = tf.zeros_like(x), tf.zeros_like(scale_x)
    return (dU, dx, tf.reshape(tf.stack([dv_f, dv_r]), [-1]), tf.reshape(tf.stack([db_f, db_r]), [-1]),
            tf.reshape(dc0, tf.shape(c0)), dscale)


@functools.lru_cache(maxsize=None)
def _compiled(dtype_name, bidirectional):
    """(forward, backward) as tf.functions: XLA-compiled when XLA works here."""
    fwd = functools.partial(_forward, bidirectional=bidirectional)
    if _USE_XLA:
        xla = (tf.function(fwd, jit_compile=True),
               tf.function(functools.partial(_backward, bidirectional=bidirectional, in_place=True),
                           jit_compile=True))
        try:
            with tf.init_scope():  # probe eagerly, even when first called while tracing
                dirs = 2 if bidirectional else 1
                z = lambda *shape: tf.zeros(shape, dtype_name)  # noqa: E731
                args = (z(1, 2, 3 * dirs), z(1, 2, dirs), z(2 * dirs), z(2 * dirs), z(1, dirs),
                        tf.zeros([1, 2], tf.bool), z(), z(1, dirs))
                h, c_last, c_seq = xla[0](*args)
                xla[1](*args, c_seq, h, c_last)
            return xla
        except (tf.errors.OpError, NotImplementedError, ValueError):
            pass
    return tf.function(fwd), tf.function(functools.partial(_backward, bidirectional=bidirectional,
                                                           in_place=False))


def _core(U, x, weight_c, bias, c0, pad, scale_x, mask_c, bidirectional):
    """Differentiable in U, x, weight_c, bias, c0, scale_x; all in one compute dtype."""
    fwd, bwd = _compiled(U.dtype.name, bidirectional)

    @tf.custom_gradient
    def op(U, x, weight_c, bias, c0, scale_x):
        # Nothing inside is recorded by autodiff (the gradient is ``grad``), which
        # also keeps the compiled loop from exporting its intermediates.
        inputs = [tf.stop_gradient(t) for t in (U, x, weight_c, bias, c0, pad, scale_x, mask_c)]
        h, c_last, c_seq = fwd(*inputs)

        def grad(dh, dc_last):
            dc_last = tf.zeros_like(c_last) if dc_last is None else dc_last
            return bwd(*inputs, c_seq, dh, dc_last)

        return (h, c_last), grad

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
    mask_c = tf.ones_like(c0) if dropout_mask is None else cast(dropout_mask)
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
    """Same contract as ``sru_recurrence``, written the straightforward way: one
    ``tf.while_loop`` per direction with every gate computed inside the loop
    (inputs read per step from time-major TensorArrays), differentiated by
    TensorFlow's autodiff, which keeps every step's intermediates.  It is the
    reference for the gradient tests and the baseline for the benchmarks."""
    U, x, weight_c, bias, c0, pad, scale, mask_c, out_dtype = _prepare(
        U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional)
    dirs, d, k = _layout(U, x, weight_c, bias, bidirectional)
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    Uk = tf.reshape(U, [B, L, dirs, d, k])
    xp = Uk[..., 3] if k == 4 else tf.reshape(x, [B, L, dirs, d]) * scale
    w = tf.reshape(weight_c, [2, dirs, d])
    b = tf.reshape(bias, [2, dirs, d])
    m = tf.reshape(mask_c, [B, dirs, d])
    hs, cs_last = [], []
    for di in range(dirs):
        def time_major(t):
            t = tf.transpose(t, [1, 0] + list(range(2, t.shape.rank)))
            return tf.TensorArray(U.dtype, size=L).unstack(t if di == 0 else tf.reverse(t, [0]))

        u_ta, xp_ta = time_major(Uk[:, :, di]), time_major(xp[:, :, di])
        pad_ta = tf.TensorArray(tf.bool, size=L).unstack(
            tf.transpose(pad if di == 0 else tf.reverse(pad, [1]))[:, :, None])

        def body(t, c_prev, h_acc, di=di, u_ta=u_ta, xp_ta=xp_ta, pad_ta=pad_ta):
            u, xp_t, p = u_ta.read(t), xp_ta.read(t), pad_ta.read(t)
            f = tf.sigmoid(u[..., 1] + w[0, di] * c_prev + b[0, di])
            r = tf.sigmoid(u[..., 2] + w[1, di] * c_prev + b[1, di])
            c = u[..., 0] + (c_prev - u[..., 0]) * f
            h = xp_t + (c - xp_t) * m[:, di] * r
            return t + 1, tf.where(p, c_prev, c), h_acc.write(t, tf.where(p, tf.zeros_like(h), h))

        _, c_last, h_acc = tf.while_loop(
            lambda t, *_: t < L, body,
            (tf.constant(0), tf.reshape(c0, [B, dirs, d])[:, di], tf.TensorArray(U.dtype, size=L)),
            maximum_iterations=U.shape[1] or L)  # a static bound lets XLA compile the loop
        h = h_acc.stack()
        hs.append(tf.transpose(h if di == 0 else tf.reverse(h, [0]), [1, 0, 2]))
        cs_last.append(c_last)
    h = tf.concat(hs, axis=-1)
    return tf.cast(h, out_dtype), tf.cast(tf.concat(cs_last, axis=-1), out_dtype)
