"""TensorFlow argument preparation of the recurrence and its scan order.

``prepare`` converts a call's arguments to tensors in the compute dtype and
parses its ``Layout`` (``common``, backend-free) once; ``flip_time`` and
``unflip_time`` convert between batch-major and the loops' scan order.
Shapes: docs/srupp.md and ``common``.
"""

from typing import NamedTuple

import tensorflow as tf

from gau_keras.recurrence.common import Layout

__all__ = ["Layout", "Prepared", "compute_dtype", "flip_time", "prepare", "unflip_time"]


def compute_dtype(dtype):
    """float16/bfloat16 are computed in float32; float32/float64 unchanged."""
    return tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype


def flip_time(t, bidirectional):
    """Batch-major [B, L, dirs, ...] → scan order [L, B, dirs, ...] (direction 1 reversed in time)."""
    t = tf.transpose(t, [1, 0] + list(range(2, t.shape.rank)))
    if bidirectional:
        t = tf.concat([t[:, :, :1], tf.reverse(t[:, :, 1:], axis=[0])], axis=2)
    return t


def unflip_time(t, bidirectional):
    """Scan order [L, B, dirs, ...] (direction 1 reversed in time) → batch-major [B, L, dirs, ...]."""
    if bidirectional:
        t = tf.concat([t[:, :, :1], tf.reverse(t[:, :, 1:], axis=[0])], axis=2)
    return tf.transpose(t, [1, 0] + list(range(2, t.shape.rank)))


class Prepared(NamedTuple):
    """The arguments of a call as tensors in the compute dtype, and its layout."""

    layout: Layout
    U: tf.Tensor
    x: tf.Tensor
    weight_c: tf.Tensor
    bias: tf.Tensor
    c0: tf.Tensor
    pad: tf.Tensor
    scale: tf.Tensor
    mask_c: tf.Tensor
    out_dtype: tf.DType

    @property
    def tensors(self):
        """The eight inputs of the forward/backward pair, in their order."""
        return self.U, self.x, self.weight_c, self.bias, self.c0, self.pad, self.scale, self.mask_c


def prepare(U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional):
    """Converts the arguments to tensors in the compute dtype (defaults for the
    optional ones) and parses the layout once."""
    U = tf.convert_to_tensor(U)
    out_dtype = U.dtype
    if not out_dtype.is_floating:
        raise TypeError(f"sru_recurrence: U must be floating point, got {out_dtype.name}")
    dtype = compute_dtype(out_dtype)
    cast = lambda t: tf.cast(tf.convert_to_tensor(t, dtype_hint=dtype), dtype)  # noqa: E731
    U, x, weight_c, bias = cast(U), cast(x), cast(weight_c), cast(bias)
    layout = Layout.of(U, x, weight_c, bias, bidirectional)
    B, L = tf.shape(U)[0], tf.shape(U)[1]
    c0 = tf.zeros(tf.stack([B, layout.dirs * layout.d]), dtype) if c0 is None else cast(c0)
    if mask_pad is None:
        pad = tf.zeros(tf.stack([B, L]), tf.bool)
    else:
        pad = tf.convert_to_tensor(mask_pad)
        if pad.shape.rank != 2:
            raise ValueError(f"sru_recurrence: mask_pad must be [B, L] (True = padding), got shape {pad.shape}")
        pad = tf.cast(pad, tf.bool)
    scale = cast(1.0 if scale_x is None else scale_x)
    if scale.shape.rank != 0:
        # any one-element tensor will do, e.g. the official package's scale_x buffer of shape (1,)
        if scale.shape.num_elements() != 1:
            raise ValueError(
                f"sru_recurrence: scale_x must hold one value (a scalar or a tensor of shape "
                f"(1,), ...), got shape {scale.shape}"
            )
        scale = tf.reshape(scale, [])
    mask_c = tf.ones_like(c0) if dropout_mask is None else cast(dropout_mask)
    return Prepared(layout, U, x, weight_c, bias, c0, pad, scale, mask_c, out_dtype)
