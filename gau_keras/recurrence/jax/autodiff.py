"""The recurrence on JAX written the straightforward way, differentiated by autodiff.

The JAX counterpart of ``reference.py``: the reference for the JAX tests and
the baseline of ``benchmarks/srupp_jax.py``.  One ``lax.scan`` per direction
(direction 1 with ``reverse=True``) computes every gate inside the step, so
``jax.grad`` keeps every step's intermediates for the backward pass.
"""

import jax
import jax.numpy as jnp

from gau_keras.recurrence.jax.prepare import prepare


def _direction(u, xp, pad, c0, v, b, m, reverse):
    """One direction: u [L, B, d, k], xp [L, B, d], pad [L, B, 1], c0 [B, d],
    v/b [2, d] (forget, reset), m [B, d] → h [L, B, d], c_last [B, d]."""

    def step(c_prev, inputs):
        u_t, xp_t, pad_t = inputs
        f = jax.nn.sigmoid(u_t[..., 1] + v[0] * c_prev + b[0])
        r = jax.nn.sigmoid(u_t[..., 2] + v[1] * c_prev + b[1])
        c = u_t[..., 0] + (c_prev - u_t[..., 0]) * f
        h = xp_t + (c - xp_t) * m * r
        return jnp.where(pad_t, c_prev, c), jnp.where(pad_t, 0.0, h)

    c_last, h = jax.lax.scan(step, c0, (u, xp, pad), reverse=reverse)
    return h, c_last


def sru_recurrence_autodiff(
    U, x, weight_c, bias, c0=None, mask_pad=None, scale_x=None, dropout_mask=None, bidirectional=False
):
    """Same contract as ``sru_recurrence`` (U [B, L, dirs·d·k], x [B, L, d_in],
    weight_c/bias [2·dirs·d], c0 [B, dirs·d], mask_pad [B, L], dropout_mask
    [B, dirs·d] → h [B, L, dirs·d], c_last [B, dirs·d] in U's dtype), with no
    custom gradient: JAX differentiates the scans."""
    p = prepare(U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional)
    U, x, weight_c, bias, c0, pad, scale, mask_c = p.arrays
    dirs, d, k = p.layout
    B, L = U.shape[:2]
    time_major = lambda t: jnp.swapaxes(t, 0, 1)  # noqa: E731
    Uk = U.reshape(B, L, dirs, d, k)
    xp = Uk[..., 3] if k == 4 else x.reshape(B, L, dirs, d) * scale
    v, b = weight_c.reshape(2, dirs, d), bias.reshape(2, dirs, d)
    c0, m = c0.reshape(B, dirs, d), mask_c.reshape(B, dirs, d)
    hs, cs = [], []
    for i in range(dirs):
        h, c_last = _direction(
            time_major(Uk[:, :, i]),
            time_major(xp[:, :, i]),
            time_major(pad)[..., None],
            c0[:, i],
            v[:, i],
            b[:, i],
            m[:, i],
            reverse=i == 1,
        )
        hs.append(time_major(h))
        cs.append(c_last)
    return (jnp.concatenate(hs, axis=-1).astype(p.out_dtype), jnp.concatenate(cs, axis=-1).astype(p.out_dtype))
