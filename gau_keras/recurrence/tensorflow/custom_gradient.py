"""``sru_recurrence`` on TensorFlow: ``tf.custom_gradient`` around a forward/backward pair.

The matrix work that produces U stays outside (batched over all steps); here
only the elementwise recurrence runs, forward in time and then, for the
gradient, backward in time, keeping only c between the two (the op's own
inputs are referenced, not copied; autodiff through a ``tf.while_loop`` keeps
every intermediate of every step).  Two implementations of that pair:

* ``native`` (the default on CPU): ``native/sru_ops.cc``, one fused pass over
  time per (batch row, direction) chain, compiled on first use;
* ``xla``: XLA-compiled loops (``xla_loops.py``), used on GPU/TPU, inside
  XLA-compiled functions, for dtypes the kernel lacks and without a C++ compiler.

`kernel_choice` says which one a call uses.  (The file is not the package's
``__init__.py``: AutoGraph mixes up functions of two ``__init__.py`` files
traced in one ``tf.function``.)
"""

import tensorflow as tf

import gau_keras.recurrence.tensorflow.native as native
import gau_keras.recurrence.tensorflow.xla_loops as xla_loops
from gau_keras.recurrence.common import TRACE_SCOPE, warn_once
from gau_keras.recurrence.switches import sru_kernel
from gau_keras.recurrence.tensorflow.prepare import prepare

__all__ = ["sru_recurrence", "kernel_choice", "ACCELERATOR_WARNING"]

#: said once when TensorFlow sees a GPU or TPU: there is no fused kernel for them on this backend
ACCELERATOR_WARNING = (
    "gau_keras: on a GPU/TPU, TensorFlow runs SRU++'s recurrence as XLA loops (one step at a "
    "time); KERAS_BACKEND=jax runs it as one fused Pallas kernel (docs/srupp.md, Accelerators)"
)


def _in_xla_context():
    """True while tracing inside an XLA-compiled function (no XLA kernel exists for the native op)."""
    try:
        from tensorflow.python.ops import control_flow_util

        return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
    except Exception:  # noqa: BLE001 - a private API: when it is gone, assume XLA and stay safe
        return True


def kernel_choice(dtype="float32", implementation=None):
    """Which implementation ``sru_recurrence`` uses now: "native" or "xla".

    ``implementation`` (default: ``$GAU_KERAS_SRU_KERNEL``, else "auto"):
    "auto" uses the native CPU kernel for
    float32/float64 when no GPU or TPU is visible and the call is not being
    compiled by XLA, and the XLA loops otherwise (also when the kernel cannot
    be built here); "native" requires the kernel (raises KernelUnavailable);
    "xla" (or its alias "scan", the JAX backend's name for its loops) always
    uses the XLA loops (plain graph loops when XLA fails); "pallas" (JAX's
    kernel) raises ValueError."""
    mode, source = sru_kernel(implementation)
    if mode == "pallas":
        raise ValueError(
            f"sru_recurrence: {source}='pallas' is the JAX backend's fused kernel; on TensorFlow "
            f"use 'auto', 'native' or 'xla' (KERAS_BACKEND=jax runs the Pallas kernel)"
        )
    if mode not in ("auto", "native", "xla", "scan"):
        raise ValueError(
            f"sru_recurrence: {source}={mode!r}; expected 'auto', 'native' or 'xla' ('scan' is an alias of 'xla')"
        )
    if mode in ("xla", "scan"):
        return "xla"
    if mode == "native":
        native.load()
        return "native"
    if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"):
        warn_once(ACCELERATOR_WARNING)
        return "xla"
    if tf.as_dtype(dtype) not in (tf.float32, tf.float64) or _in_xla_context():
        return "xla"
    try:
        native.load()
    except native.KernelUnavailable as reason:
        warn_once(f"gau_keras: native SRU kernel unavailable, using the XLA loops: {reason}")
        return "xla"
    return "native"


def _core(layout, U, x, weight_c, bias, c0, pad, scale_x, mask_c, implementation=None):
    """Differentiable in U, x, weight_c, bias, c0, scale_x; all in one compute dtype."""
    if kernel_choice(U.dtype, implementation) == "native":
        fwd, bwd = native.pair(layout)
    else:
        fwd, bwd = xla_loops.compiled(U.dtype.name, layout)

    @tf.custom_gradient
    def op(U, x, weight_c, bias, c0, scale_x):
        # Nothing inside is recorded by autodiff (the gradient is ``grad``), which
        # also keeps the compiled loop from exporting its intermediates.
        inputs = [tf.stop_gradient(t) for t in (U, x, weight_c, bias, c0, pad, scale_x, mask_c)]
        with tf.name_scope(TRACE_SCOPE):  # the name profilers find the recurrence's ops by
            h, c_last, c_seq = fwd(*inputs)

        def grad(dh, dc_last):
            with tf.name_scope(TRACE_SCOPE):
                dc_last = tf.zeros_like(c_last) if dc_last is None else dc_last
                return bwd(*inputs, c_seq, dh, dc_last)

        return (h, c_last), grad

    return op(U, x, weight_c, bias, c0, scale_x)


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
    """``gau_keras.recurrence.sru_recurrence`` on TensorFlow (arguments, shapes and
    dtypes there), with a fused custom gradient. ``implementation``: "auto"
    (default, or ``$GAU_KERAS_SRU_KERNEL``): the fused C++ kernel on CPU, the XLA
    loops on GPU/TPU and inside XLA-compiled functions; "native" or "xla" to
    force one (see ``kernel_choice``)."""
    p = prepare(U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional)
    h, c_last = _core(p.layout, *p.tensors, implementation=implementation)
    return tf.cast(h, p.out_dtype), tf.cast(c_last, p.out_dtype)
