"""The recurrence as a ``lax.scan`` forward and a hand-written ``custom_vjp`` backward.

Mirrors TensorFlow's ``xla_loops.py``: the forward scan carries c and computes only f and c per
step (r and h follow batched), keeping c_seq alone for the backward.  The
backward (docs/srupp.md) computes every term that does not depend on the
carried dc batched, then a reverse ``lax.scan`` runs only the linear dc
recurrence; dU and the weight_c/bias sums follow batched from its output.
Scan order is [L, B, dirs, d] with direction 1 reversed in time, so both
directions run in one scan.  The pair is ``jax.jit``-compiled per layout and
works under ``jax.jit``, ``jax.eval_shape`` (Keras's symbolic build) and
Keras's stateless training step.  On a GPU or TPU every step of a scan is its
own kernel launch; ``pallas_kernel`` runs the whole time loop in one kernel
there, and ``gau_keras.recurrence.jax`` chooses between the two.
"""

import functools

import jax
import jax.numpy as jnp

from gau_keras.recurrence.common import TRACE_SCOPE

__all__ = ["recurrence"]


# ---------------------------------------------------------------- scan order


def _scan_order(t, bidirectional):
    """Batch-major [B, L, dirs, ...] → scan order [L, B, dirs, ...] (direction 1 reversed in time)."""
    t = jnp.swapaxes(t, 0, 1)
    return jnp.concatenate([t[:, :, :1], t[::-1, :, 1:]], axis=2) if bidirectional else t


def _batch_major(t, bidirectional):
    """Scan order [L, B, dirs, ...] (direction 1 reversed in time) → batch-major [B, L, dirs, ...]."""
    if bidirectional:
        t = jnp.concatenate([t[:, :, :1], t[::-1, :, 1:]], axis=2)
    return jnp.swapaxes(t, 0, 1)


def _parts(layout, U, x, weight_c, bias, scale):
    """U as [B, L, dirs, d, k]; the skip term x' as [B, L, dirs, d]; weights as [dirs, d]."""
    B, L = U.shape[:2]
    dirs, d, k = layout
    Uk = U.reshape(B, L, dirs, d, k)
    xp = Uk[..., 3] if k == 4 else x.reshape(B, L, dirs, d) * scale
    v_f, v_r = weight_c.reshape(2, dirs, d)
    b_f, b_r = bias.reshape(2, dirs, d)
    return Uk, xp, v_f, v_r, b_f, b_r


# ---------------------------------------------------------------- forward and backward


def _forward(layout, U, x, weight_c, bias, c0, pad, scale, mask_c):
    """→ h [B, L, dirs·d], c_last [B, dirs·d], c_seq [L, B, dirs, d] (scan order),
    the only array kept for the backward.  The scan carries c [B, dirs, d] and
    computes only f and c; r and h follow batched."""
    B, L = U.shape[:2]
    dirs, d, _ = layout
    Uk, xp, v_f, v_r, b_f, b_r = _parts(layout, U, x, weight_c, bias, scale)
    order = functools.partial(_scan_order, bidirectional=layout.bidirectional)
    pad4 = pad[:, :, None, None]

    def step(c_prev, inputs):
        u0, u1, padded = inputs
        f = jax.nn.sigmoid(u1 + v_f * c_prev)
        c = jnp.where(padded, c_prev, u0 + (c_prev - u0) * f)
        return c, c

    c_init = c0.reshape(B, dirs, d)
    pads = order(jnp.broadcast_to(pad4, (B, L, dirs, 1)))
    c_last, c_seq = jax.lax.scan(step, c_init, (order(Uk[..., 0]), order(Uk[..., 1] + b_f), pads))
    c_prev = jnp.concatenate([c_init[None], c_seq[:-1]], axis=0)
    c, c_prev = (_batch_major(t, layout.bidirectional) for t in (c_seq, c_prev))
    r = jax.nn.sigmoid(Uk[..., 2] + b_r + v_r * c_prev)
    h = jnp.where(pad4, 0.0, xp + (c - xp) * mask_c.reshape(B, 1, dirs, d) * r)
    return h.reshape(B, L, dirs * d), c_last.reshape(B, dirs * d), c_seq


def _backward_terms(layout, U, x, weight_c, bias, c0, pad, scale, mask_c, c_seq, dh):
    """The batched prologue, every term in scan order [L, B, dirs, d]: c_{t−1},
    f, keep (0 on padding), dh (0 on padding), A = dh·m·r, dgr = dh·(c − x')·m·r(1 − r),
    G = (c_{t−1} − u0)·f(1 − f) and F = f + G·v_f (1 on padding)."""
    B, L = U.shape[:2]
    dirs, d, _ = layout
    Uk, xp, v_f, v_r, b_f, b_r = _parts(layout, U, x, weight_c, bias, scale)
    order = functools.partial(_scan_order, bidirectional=layout.bidirectional)
    u0, u1, u2 = (order(Uk[..., i]) for i in range(3))
    keep = order(jnp.broadcast_to(~pad[:, :, None, None], (B, L, dirs, 1))).astype(U.dtype)
    dh = order(dh.reshape(B, L, dirs, d)) * keep  # h = 0 on padding
    c_prev = jnp.concatenate([c0.reshape(1, B, dirs, d), c_seq[:-1]], axis=0)
    f = jax.nn.sigmoid(u1 + b_f + v_f * c_prev)
    r = jax.nn.sigmoid(u2 + b_r + v_r * c_prev)
    A = dh * mask_c.reshape(B, dirs, d) * r
    dgr = (A - A * r) * (c_seq - order(xp))
    G = (c_prev - u0) * f * (1.0 - f) * keep
    F = keep * (f + G * v_f) + (1.0 - keep)
    return c_prev, f, keep, dh, A, dgr, G, F


def _backward(layout, U, x, weight_c, bias, c0, pad, scale, mask_c, c_seq, dh, dc_last):
    """Every gradient from the saved c_seq (docs/srupp.md) → (dU, dx, dweight_c,
    dbias, dc0, dscale).  With s_t = dc_t + A_t, the total gradient reaching
    c_t, the reverse scan runs only dc_{t−1} = s_t·F_t + dgr_t·v_r (linear in
    dc) and returns every s; then du0 = s(1 − f), du1 = dg_f = s·G, du2 = dgr,
    du3 = dx' = dh(1 − m·r) = dh − A, and the weight_c/bias sums, batched."""
    B, L = U.shape[:2]
    dirs, d, k = layout
    bidirectional = layout.bidirectional
    v_r = weight_c.reshape(2, dirs, d)[1]
    c_prev, f, keep, dh, A, dgr, G, F = _backward_terms(layout, U, x, weight_c, bias, c0, pad, scale, mask_c, c_seq, dh)

    def step(dc, inputs):
        a, f_gate, from_r = inputs
        s = dc + a
        return s * f_gate + from_r, s

    dc0, s = jax.lax.scan(step, dc_last.reshape(B, dirs, d), (A, F, dgr * v_r), reverse=True)
    dg_f, dxp = s * G, dh - A
    rows = [s * (1.0 - f) * keep, dg_f, dgr] + ([dxp] if k == 4 else [])
    dU = _batch_major(jnp.stack(rows, axis=-1), bidirectional).reshape(U.shape)
    total = lambda t: jnp.sum(t, axis=(0, 1))  # noqa: E731 - over time and batch → [dirs, d]
    dweight_c = jnp.stack([total(dg_f * c_prev), total(dgr * c_prev)]).reshape(-1)
    dbias = jnp.stack([total(dg_f), total(dgr)]).reshape(-1)
    if k == 3:
        dx = _batch_major(dxp, bidirectional).reshape(x.shape) * scale
        dscale = jnp.sum(dxp * _scan_order(x.reshape(B, L, dirs, d), bidirectional))
    else:
        dx, dscale = jnp.zeros_like(x), jnp.zeros_like(scale)
    return dU, dx, dweight_c, dbias, dc0.reshape(c0.shape), dscale


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _recurrence(layout, U, x, weight_c, bias, c0, pad, scale, mask_c):
    """(h, c_last); differentiable in U, x, weight_c, bias, c0, scale (pad and mask_c get none)."""
    with jax.named_scope(TRACE_SCOPE):
        h, c_last, _ = _forward(layout, U, x, weight_c, bias, c0, pad, scale, mask_c)
    return h, c_last


def _recurrence_fwd(layout, *inputs):
    with jax.named_scope(TRACE_SCOPE):
        h, c_last, c_seq = _forward(layout, *inputs)
    return (h, c_last), (inputs, c_seq)


def _recurrence_bwd(layout, saved, cotangents):
    inputs, c_seq = saved
    with jax.named_scope(TRACE_SCOPE):
        dU, dx, dweight_c, dbias, dc0, dscale = _backward(layout, *inputs, c_seq, *cotangents)
    return dU, dx, dweight_c, dbias, dc0, None, dscale, None


_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)
#: (layout, U, x, weight_c, bias, c0, pad, scale, mask_c) → (h, c_last), compiled per layout
recurrence = jax.jit(_recurrence, static_argnums=0)
