"""The XLA implementation of the recurrence's forward and backward pass.

``tf.function(jit_compile=True)`` loops (plain graph loops where XLA fails;
``GAU_KERAS_SRU_XLA=0`` forces those). The forward scan carries c and
computes only f and c per step, r and h follow batched. The backward computes
every term that does not depend on the carried dc batched, before the loop;
the reverse loop then runs only the linear dc recurrence, writes du0 and du1
and sums the weight_c/bias gradients. Used on GPU/TPU, inside XLA-compiled
functions (e.g. a jit-compiled training step), for dtypes the native kernel
lacks, and when no C++ compiler is available. The equations: docs/srupp.md.
"""

import functools

import tensorflow as tf

from gau_keras.recurrence.switches import sru_xla
from gau_keras.recurrence.tensorflow.prepare import flip_time, unflip_time

USE_XLA = sru_xla()


def _parts(layout, U, x, weight_c, bias, scale_x):
    """U as [B, L, dirs, d, k]; the skip term x' as [B, L, dirs, d]; weights as [dirs, d]."""
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    dirs, d, k = layout
    Uk = tf.reshape(U, [B, L, dirs, d, k])
    xp = Uk[..., 3] if k == 4 else tf.reshape(x, [B, L, dirs, d]) * scale_x
    v_f, v_r = tf.unstack(tf.reshape(weight_c, [2, dirs, d]))
    b_f, b_r = tf.unstack(tf.reshape(bias, [2, dirs, d]))
    return Uk, xp, v_f, v_r, b_f, b_r


def _states(c_seq, c0, bidirectional):
    """Saved scan-order c → (c_t, c_{t−1}) batch-major [B, L, dirs, d]."""
    c_prev = tf.concat([c0[None], c_seq[:-1]], axis=0)
    return unflip_time(c_seq, bidirectional), unflip_time(c_prev, bidirectional)


def forward(layout, U, x, weight_c, bias, c0, pad, scale_x, mask_c):
    """→ h [B, L, dirs·d], c_last [B, dirs·d], c_seq [L, B, dirs, d] (scan order:
    direction 1 flipped in time), the only tensor kept for the backward pass.
    The loop carries c and computes only f and c; r and h follow batched."""
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    Uk, xp, v_f, v_r, b_f, b_r = _parts(layout, U, x, weight_c, bias, scale_x)
    u0, u1, u2 = Uk[..., 0], Uk[..., 1], Uk[..., 2]
    dirs, d, _ = layout
    bidirectional = layout.bidirectional
    c0 = tf.reshape(c0, [B, dirs, d])
    pad4 = pad[:, :, None, None]
    pad_t = flip_time(tf.broadcast_to(pad4, [B, L, dirs, 1]), bidirectional)

    def step(c_prev, inputs):
        u0_t, u1_t, pad_t = inputs
        f = tf.sigmoid(u1_t + v_f * c_prev)
        c = u0_t + (c_prev - u0_t) * f
        return tf.where(pad_t, c_prev, c)

    c_seq = tf.scan(step, (flip_time(u0, bidirectional), flip_time(u1 + b_f, bidirectional), pad_t), initializer=c0)
    c, c_prev = _states(c_seq, c0, bidirectional)
    r = tf.sigmoid(u2 + b_r + v_r * c_prev)
    m = tf.reshape(mask_c, [B, 1, dirs, d])
    h = tf.where(pad4, tf.zeros_like(xp), xp + (c - xp) * m * r)
    return tf.reshape(h, [B, L, dirs * d]), tf.reshape(c_seq[-1], [B, dirs * d]), c_seq


def backward(layout, U, x, weight_c, bias, c0, pad, scale_x, mask_c, c_seq, dh, dc_last, in_place=False):
    """Every gradient from the saved c_seq (docs/srupp.md) → (dU, dx, dweight_c,
    dbias, dc0, dscale_x).

    With c known for all steps, f, r and every term except the carried dc are
    elementwise over the whole sequence (the prologue, batched).  What remains
    sequential is linear: with s_t = dc_t + A_t, the total gradient reaching
    c_t, dc_{t−1} = s_t·F_t + dgr_t·v_r, where A = dh·m·r, G = (c_{t−1} − u0)·f(1−f)
    (dc_t/d of f's pre-activation), F = f + G·v_f (padding: A = G = dgr = 0,
    F = 1, so dc passes through).  The reverse loop runs that recurrence in scan
    order [L, B, dirs, d], writes each step's row of dU (du0 = s(1−f), du1 = s·G,
    dgr) and sums the weight_c and bias gradients on the way; dx follows from A.
    ``in_place`` (XLA only): rows go straight into a batch-major dU buffer."""
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    Uk, xp, v_f, v_r, b_f, b_r = _parts(layout, U, x, weight_c, bias, scale_x)
    dirs, d, k = layout
    bidirectional = layout.bidirectional
    scan = functools.partial(flip_time, bidirectional=bidirectional)
    u0, u1, u2 = (scan(Uk[..., i]) for i in range(3))
    keep = scan(tf.cast(tf.broadcast_to(tf.logical_not(pad)[:, :, None, None], [B, L, dirs, 1]), U.dtype))
    dh_s = scan(tf.reshape(dh, [B, L, dirs, d])) * keep  # h = 0 on padding
    m = tf.reshape(mask_c, [B, dirs, d])
    c_init = tf.reshape(c0, [B, dirs, d])
    c_prev = tf.concat([c_init[None], c_seq[:-1]], axis=0)
    f = tf.sigmoid(u1 + b_f + v_f * c_prev)
    r = tf.sigmoid(u2 + b_r + v_r * c_prev)
    A = dh_s * m * r
    dgr = (A - A * r) * (c_seq - scan(xp))
    G = (c_prev - u0) * f * (1.0 - f) * keep
    F = keep * (f + G * v_f) + (1.0 - keep)

    # The loop writes dU row by row.  Under XLA into a batch-major buffer updated in
    # place (no time-major copy to transpose after the loop); in a plain graph that
    # update would copy the whole buffer every step, so rows go to a TensorArray.
    if in_place:
        from tensorflow.compiler.tf2xla.python import xla as tf2xla

    def put(du, t, row):
        if not in_place:
            return du.write(t, row)
        for i, time in enumerate([t, L - 1 - t][:dirs]):  # direction 1 runs back in time
            start = tf.stack([0, time, i, 0, 0])
            du = tf2xla.dynamic_update_slice(du, row[:, None, i : i + 1], start)
        return du

    def body(t, dc, sums, du):
        # gathers: XLA's dynamic slice (A[t] compiles to a slower strided slice)
        a, g, f_gate, dg_r = (tf.gather(T, t) for T in (A, G, F, dgr))
        cp = tf.where(t > 0, tf.gather(c_seq, tf.maximum(t - 1, 0)), c_init)
        s = dc + a
        dg_f = s * g
        sums = [sums[0] + dg_f * cp, sums[1] + dg_r * cp, sums[2] + dg_f, sums[3] + dg_r]
        row = [s * (1.0 - f_gate + g * v_f), dg_f, dg_r]  # 1 − f = 1 − F + G·v_f
        if k == 4:
            row.append(tf.gather(dh_s, t) - a)  # dh·(1 − m·r)
        return t - 1, s * f_gate + dg_r * v_r, sums, put(du, t, tf.stack(row, -1))

    zeros = tf.zeros_like(c_init)
    du = (
        tf.zeros([B, L, dirs, d, k], U.dtype)
        if in_place
        else tf.TensorArray(U.dtype, size=L, element_shape=[None, dirs, d, k])
    )
    _, dc0, sums, du = tf.while_loop(
        lambda t, *_: t >= 0, body, (L - 1, tf.reshape(dc_last, [B, dirs, d]), [zeros] * 4, du)
    )
    dU = tf.reshape(du if in_place else unflip_time(du.stack(), bidirectional), tf.shape(U))
    if k == 3:  # dx' = dh·(1 − m·r), from A after the loop
        dx = tf.reshape(unflip_time(dh_s - A, bidirectional) * scale_x, tf.shape(x))
        x_s = scan(tf.reshape(x, [B, L, dirs, d]))
        dscale = tf.reduce_sum(dh_s * x_s) - tf.reduce_sum(A * x_s)
    else:
        dx, dscale = tf.zeros_like(x), tf.zeros_like(scale_x)
    sums = [tf.reduce_sum(t, axis=0) for t in sums]
    return (
        dU,
        dx,
        tf.reshape(tf.stack(sums[:2]), [-1]),
        tf.reshape(tf.stack(sums[2:]), [-1]),
        tf.reshape(dc0, tf.shape(c0)),
        dscale,
    )


@functools.cache
def compiled(dtype_name, layout):
    """(forward, backward) of one layout as tf.functions of the eight inputs (and
    c_seq, dh, dc_last): XLA-compiled when XLA compiles them here, plain graph
    loops otherwise (or with ``GAU_KERAS_SRU_XLA=0``)."""
    fwd = functools.partial(forward, layout)
    if USE_XLA:
        xla = (
            tf.function(fwd, jit_compile=True),
            tf.function(functools.partial(backward, layout, in_place=True), jit_compile=True),
        )
        try:
            with tf.init_scope():  # probe eagerly, even when first called while tracing
                dirs, d, k = layout
                z = lambda *shape: tf.zeros(shape, dtype_name)  # noqa: E731
                args = (
                    z(1, 2, dirs * d * k),
                    z(1, 2, dirs * d),
                    z(2 * dirs * d),
                    z(2 * dirs * d),
                    z(1, dirs * d),
                    tf.zeros([1, 2], tf.bool),
                    z(),
                    z(1, dirs * d),
                )
                h, c_last, c_seq = xla[0](*args)
                xla[1](*args, c_seq, h, c_last)
            return xla
        except (tf.errors.OpError, NotImplementedError, ValueError):
            pass
    return tf.function(fwd), tf.function(functools.partial(backward, layout))
