"""JAX argument preparation of the recurrence: arrays in the compute dtype, defaults, the layout.

Shared by the ``lax.scan`` pair (``scan``), the Pallas kernel
(``pallas_kernel``) and the autodiff reference (``autodiff``).  Shapes:
docs/srupp.md and ``gau_keras.recurrence.common``.
"""

from typing import Any, NamedTuple

import jax.numpy as jnp
import keras

from gau_keras.recurrence.common import HALF_DTYPES, Layout

__all__ = ["Prepared", "prepare"]


class Prepared(NamedTuple):
    """The arguments of a call as arrays, and its layout.  U and x are in the
    compute dtype (float16/bfloat16 → float32) unless ``prepare`` was asked to
    keep their own; everything else is in the compute dtype."""

    layout: Layout
    U: Any
    x: Any
    weight_c: Any
    bias: Any
    c0: Any
    pad: Any
    scale: Any
    mask_c: Any
    out_dtype: Any

    @property
    def arrays(self):
        """The eight inputs of the forward/backward pair, in their order."""
        return self.U, self.x, self.weight_c, self.bias, self.c0, self.pad, self.scale, self.mask_c


def _array(t, dtype=None):
    """A JAX array of t (a Keras variable's current value: the stateless scope's inside a train step)."""
    if isinstance(t, keras.Variable):
        t = t.value
    return jnp.asarray(t, dtype)


def _scale(scale_x, dtype):
    """scale_x (None, a scalar or any one-element tensor) → a scalar."""
    scale = _array(1.0 if scale_x is None else scale_x, dtype)
    if scale.ndim:
        # any one-element tensor will do, e.g. the official package's scale_x buffer of shape (1,)
        if scale.size != 1:
            raise ValueError(
                f"sru_recurrence: scale_x must hold one value (a scalar or a tensor of shape "
                f"(1,), ...), got shape {scale.shape}"
            )
        scale = scale.reshape(())
    return scale


def compute_dtype(dtype):
    """float16/bfloat16 are computed in float32; float32/float64 unchanged."""
    return jnp.dtype(jnp.float32) if jnp.dtype(dtype).name in HALF_DTYPES else jnp.dtype(dtype)


def prepare(U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional, keep_io_dtype=False):
    """Converts the arguments to arrays (float16/bfloat16 → float32; defaults for
    the optional ones) and parses the layout once.  ``keep_io_dtype``: U and x
    stay in U's own dtype (the kernel converts them row by row)."""
    U = _array(U)
    out_dtype = U.dtype
    if not jnp.issubdtype(out_dtype, jnp.floating):
        raise TypeError(f"sru_recurrence: U must be floating point, got {out_dtype}")
    dtype = compute_dtype(out_dtype)
    io_dtype = out_dtype if keep_io_dtype else dtype
    U, x = _array(U, io_dtype), _array(x, io_dtype)
    weight_c, bias = _array(weight_c, dtype), _array(bias, dtype)
    layout = Layout.of(U, x, weight_c, bias, bidirectional)
    B, L = U.shape[:2]
    c0 = jnp.zeros((B, layout.dirs * layout.d), dtype) if c0 is None else _array(c0, dtype)
    if mask_pad is None:
        pad = jnp.zeros((B, L), bool)
    else:
        pad = _array(mask_pad)
        if pad.ndim != 2:
            raise ValueError(f"sru_recurrence: mask_pad must be [B, L] (True = padding), got shape {pad.shape}")
        pad = pad.astype(bool)
    mask_c = jnp.ones_like(c0) if dropout_mask is None else _array(dropout_mask, dtype)
    return Prepared(layout, U, x, weight_c, bias, c0, pad, _scale(scale_x, dtype), mask_c, out_dtype)
