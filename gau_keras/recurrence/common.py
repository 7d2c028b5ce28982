"""What every backend's recurrence shares, free of any backend: the static
layout of one call, the trace scope name and a warn-once helper.

Shapes (docs/srupp.md): U [B, L, dirs·d·k] with the k values of one hidden
unit adjacent and the directions laid out [dir0 block | dir1 block]; x
[B, L, d_in]; weight_c and bias [2·dirs·d] laid out [2, dirs, d].
"""

import functools
import warnings
from typing import NamedTuple

#: name scope of the forward and backward ops (graph node names contain it; benchmarks/srupp_speed.py
#: finds the recurrence's share of a training step by it in a profiler trace)
TRACE_SCOPE = "sru_recurrence_kernel"

#: dtypes computed in float32 (their outputs are cast back)
HALF_DTYPES = ("float16", "bfloat16")


def _shape(t):
    """The shape of a tensor or array (TensorFlow, JAX, numpy) as a tuple, None when its rank is unknown."""
    shape = t.shape
    if getattr(shape, "rank", 0) is None:  # a TensorFlow shape of unknown rank
        return None
    return tuple(shape)


class Layout(NamedTuple):
    """Static sizes of a call: directions, hidden size d, and k (3: skip from x, 4: from U)."""

    dirs: int
    d: int
    k: int

    @property
    def bidirectional(self):
        return self.dirs == 2

    @classmethod
    def of(cls, U, x, weight_c, bias, bidirectional):
        """The layout of the arguments (anything with a ``shape``); a ValueError
        names the argument that does not fit."""
        dirs = 2 if bidirectional else 1
        U_shape, x_shape, w_shape, b_shape = (_shape(t) for t in (U, x, weight_c, bias))
        if U_shape is None or len(U_shape) != 3:
            raise ValueError(f"sru_recurrence: U must be [B, L, dirs*d*k], got shape {U.shape}")
        if x_shape is None or len(x_shape) != 3:
            raise ValueError(f"sru_recurrence: x must be [B, L, d_in], got shape {x.shape}")
        n_c = w_shape[-1] if w_shape else None
        if w_shape is None or len(w_shape) != 1 or n_c is None or n_c % (2 * dirs):
            raise ValueError(f"sru_recurrence: weight_c must be [2*dirs*d] (dirs={dirs}), got shape {weight_c.shape}")
        if b_shape != w_shape:
            raise ValueError(f"sru_recurrence: bias shape {bias.shape} must equal weight_c shape {weight_c.shape}")
        d = n_c // (2 * dirs)
        width = U_shape[-1]
        if width is None or width % (dirs * d) or width // (dirs * d) not in (3, 4):
            raise ValueError(
                f"sru_recurrence: U's last dimension ({width}) must be dirs*d*k with "
                f"dirs*d={dirs * d} (from weight_c) and k in (3, 4)"
            )
        k = width // (dirs * d)
        if k == 3 and x_shape[-1] != dirs * d:
            raise ValueError(
                f"sru_recurrence: with k=3 x's last dimension ({x_shape[-1]}) must equal dirs*d={dirs * d}"
            )
        return cls(dirs, d, k)


@functools.cache
def warn_once(message):
    """A RuntimeWarning with this message, the first time only."""
    warnings.warn(message, RuntimeWarning, stacklevel=3)
