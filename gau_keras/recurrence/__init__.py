"""The SRU elementwise recurrence (docs/srupp.md) with a hand-written gradient,
on the Keras backend in use.

The matrix work that produces U stays outside (batched over all steps); here
only the elementwise recurrence runs, forward in time keeping only c, then,
for the gradient, the hand-written backward of docs/srupp.md.  Each Keras
backend has one package, imported on first use (``BACKENDS``):

* ``tensorflow``: ``tf.custom_gradient`` around the native C++ kernel
  (``native``, the default on CPU) or the XLA loops (``xla_loops``);
  ``prepare`` (arguments), ``autodiff`` (the reference);
* ``jax``: the fused Pallas kernel (``pallas_kernel``, the default on GPU and
  TPU) or a ``lax.scan`` pair (``scan``), each a ``jax.custom_vjp``;
  ``prepare``, ``autodiff``.

Each defines ``sru_recurrence``, ``sru_recurrence_autodiff`` (the same maths
differentiated by the backend's autodiff: the tests' reference and the
benchmarks' baseline) and ``kernel_choice``; a new backend is one more package
with those three.  ``common`` holds what they share, free of any backend (the
``Layout`` of a call).

Both directions of a bidirectional layer run at once (direction 1 reversed in
time).  float16/bfloat16 are computed in float32, float64 stays float64.
"""

import importlib

import keras

from gau_keras.recurrence.common import TRACE_SCOPE, Layout
from gau_keras.recurrence.common import warn_once as _warn_once  # noqa: F401  (tests reset its cache)

__all__ = ["sru_recurrence", "sru_recurrence_autodiff", "kernel_choice", "Layout", "TRACE_SCOPE", "BACKENDS"]

#: Keras backend name -> the module holding its recurrence
BACKENDS = {"tensorflow": "gau_keras.recurrence.tensorflow", "jax": "gau_keras.recurrence.jax"}


def backend_module(backend=None):
    """The recurrence module of ``backend`` (default: ``keras.backend.backend()``)."""
    name = backend or keras.backend.backend()
    if name not in BACKENDS:
        raise NotImplementedError(
            f"sru_recurrence: no implementation for the Keras backend {name!r} (available: {', '.join(BACKENDS)})"
        )
    return importlib.import_module(BACKENDS[name])


def kernel_choice(dtype="float32", implementation=None):
    """Which implementation ``sru_recurrence`` uses now for ``dtype``.

    ``implementation``: default ``$GAU_KERAS_SRU_KERNEL``, else "auto".
    TensorFlow: "native" (the C++ kernel) or "xla" (XLA loops); see
    ``recurrence.tensorflow.kernel_choice``.  JAX: "pallas" (the fused kernel,
    "auto"'s choice on GPU and TPU) or "scan" (the ``lax.scan`` pair, "auto"'s
    choice on CPU; "xla" is its alias); see ``recurrence.jax.kernel_choice``."""
    return backend_module().kernel_choice(dtype, implementation)


def sru_recurrence(
    U,
    x,
    weight_c,
    bias,
    c0=None,
    mask_pad=None,
    scale_x=None,
    dropout_mask=None,
    bidirectional=False,
    implementation=None,
):
    """The SRU elementwise recurrence with a hand-written gradient, on the Keras backend in use.

    Args:
        U: [B, L, dirs·d·k], k = 3 or 4, the k values of one hidden unit adjacent;
            directions laid out [dir0 block | dir1 block].
        x: [B, L, d_in]; the skip term (times ``scale_x``) when k = 3, where d_in
            must be dirs·d (forward skip x[..., :d], backward skip x[..., d:]).
        weight_c, bias: [2·dirs·d], laid out [2, dirs, d] (forget then reset).
        c0: [B, dirs·d] initial state, zeros when None.
        mask_pad: [B, L] bool, True = padding (state carried, output 0).
        scale_x: one value (a scalar or any one-element tensor) multiplying the
            k = 3 skip term (1 when None).
        dropout_mask: [B, dirs·d] multiplier on c in h (1 when None); no gradient.
        bidirectional: the second direction runs t = L−1 … 0.
        implementation: see ``kernel_choice``.

    Returns:
        (h [B, L, dirs·d], c_last [B, dirs·d]) in U's dtype; float16/bfloat16
        are computed in float32, float64 in float64.
    """
    return backend_module().sru_recurrence(
        U,
        x,
        weight_c,
        bias,
        c0=c0,
        mask_pad=mask_pad,
        scale_x=scale_x,
        dropout_mask=dropout_mask,
        bidirectional=bidirectional,
        implementation=implementation,
    )


def sru_recurrence_autodiff(
    U, x, weight_c, bias, c0=None, mask_pad=None, scale_x=None, dropout_mask=None, bidirectional=False
):
    """Same contract as ``sru_recurrence``, written the straightforward way (every
    gate inside the loop) and differentiated by the backend's autodiff."""
    return backend_module().sru_recurrence_autodiff(
        U,
        x,
        weight_c,
        bias,
        c0=c0,
        mask_pad=mask_pad,
        scale_x=scale_x,
        dropout_mask=dropout_mask,
        bidirectional=bidirectional,
    )
