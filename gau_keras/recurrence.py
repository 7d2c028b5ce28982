"""The SRU elementwise recurrence (DESIGN.md §3) with a hand-written gradient.

The matrix work that produces U stays outside (batched over all steps); here
only the elementwise recurrence runs, forward in time and then, for the
gradient (``tf.custom_gradient``), backward in time, keeping only c between
the two (the op's own inputs are referenced, not copied; autodiff through a
``tf.while_loop`` keeps every intermediate of every step).  Two
implementations of that forward/backward pair:

* native (the default on CPU): ``gau_keras/kernels/sru_ops.cc``, one fused
  pass over time per (batch row, direction) chain, chains spread over the CPU
  threads, compiled on first use (`gau_keras.kernels`);
* XLA: ``tf.function(jit_compile=True)`` loops (plain graph loops where XLA
  fails; ``GAU_KERAS_SRU_XLA=0`` forces those).  The forward scan carries c and
  computes only f and c per step, r and h follow batched.  The backward
  computes every term that does not depend on the carried dc batched, before
  the loop; the reverse loop then runs only the linear dc recurrence, writes
  du0 and du1 and sums the weight_c/bias gradients.  Used on GPU/TPU, inside
  XLA-compiled functions (e.g. a jit-compiled training step), for dtypes the
  kernel lacks, and when no C++ compiler is available.

`kernel_choice` says which one a call uses.  Both directions of a
bidirectional layer run at once (direction 1 reversed in time).
float16/bfloat16 are computed in float32, float64 stays float64.

``sru_recurrence_autodiff`` is the same maths written the straightforward way
and differentiated by autodiff: the reference for the tests and the baseline
for ``benchmarks/srupp_speed.py``.
"""
import functools
import os
import warnings

import tensorflow as tf

from gau_keras import kernels

__all__ = ["sru_recurrence", "sru_recurrence_autodiff", "kernel_choice"]

_USE_XLA = os.environ.get("GAU_KERAS_SRU_XLA", "1") != "0"

#: name scope of the forward and backward ops (graph node names contain it; benchmarks/srupp_speed.py
#: finds the recurrence's share of a training step by it in a profiler trace)
TRACE_SCOPE = "sru_recurrence_kernel"


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


def _backward(U, x, weight_c, bias, c0, pad, scale_x, mask_c, c_seq, dh, dc_last, bidirectional,
              in_place=False):
    """Every gradient from the saved c_seq (DESIGN.md §3) → (dU, dx, dweight_c,
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
    Uk, xp, v_f, v_r, b_f, b_r = _parts(U, x, weight_c, bias, scale_x, bidirectional)
    dirs, d = v_f.shape
    k = U.shape[-1] // (dirs * d)
    scan = functools.partial(_flip_time, bidirectional=bidirectional)
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
            du = tf2xla.dynamic_update_slice(du, row[:, None, i:i + 1], start)
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
    du = (tf.zeros([B, L, dirs, d, k], U.dtype) if in_place
          else tf.TensorArray(U.dtype, size=L, element_shape=[None, dirs, d, k]))
    _, dc0, sums, du = tf.while_loop(
        lambda t, *_: t >= 0, body, (L - 1, tf.reshape(dc_last, [B, dirs, d]), [zeros] * 4, du))
    dU = tf.reshape(du if in_place else _unflip_time(du.stack(), bidirectional), tf.shape(U))
    if k == 3:  # dx' = dh·(1 − m·r), from A after the loop
        dx = tf.reshape(_unflip_time(dh_s - A, bidirectional) * scale_x, tf.shape(x))
        x_s = scan(tf.reshape(x, [B, L, dirs, d]))
        dscale = tf.reduce_sum(dh_s * x_s) - tf.reduce_sum(A * x_s)
    else:
        dx, dscale = tf.zeros_like(x), tf.zeros_like(scale_x)
    sums = [tf.reduce_sum(t, axis=0) for t in sums]
    return (dU, dx, tf.reshape(tf.stack(sums[:2]), [-1]), tf.reshape(tf.stack(sums[2:]), [-1]),
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
    return tf.function(fwd), tf.function(functools.partial(_backward, bidirectional=bidirectional))


def _native_pair(bidirectional):
    """(forward, backward) of the fused C++ kernels (gau_keras/kernels/sru_ops.cc),
    with the XLA pair's signatures; their c_seq is batch-major [B, L, dirs·d]."""
    ops = kernels.load()

    def forward(U, x, weight_c, bias, c0, pad, scale_x, mask_c):
        return ops.gau_keras_sru_forward(U, x, weight_c, bias, c0, pad, scale_x, mask_c,
                                         bidirectional=bidirectional)

    def backward(U, x, weight_c, bias, c0, pad, scale_x, mask_c, c_seq, dh, dc_last):
        dU, dx, dw_rows, db_rows, dc0, dscale_rows = ops.gau_keras_sru_backward(
            U, x, weight_c, bias, c0, pad, scale_x, mask_c, c_seq, dh, dc_last, bidirectional=bidirectional)
        # per-batch-row partial sums (dscale_rows is all zeros when k = 4, which has no scale_x term)
        return (dU, dx, tf.reduce_sum(dw_rows, 0), tf.reduce_sum(db_rows, 0), dc0, tf.reduce_sum(dscale_rows))

    return forward, backward


def _in_xla_context():
    """True while tracing inside an XLA-compiled function (no XLA kernel exists for the native op)."""
    try:
        from tensorflow.python.ops import control_flow_util

        return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
    except Exception:  # noqa: BLE001 - a private API: when it is gone, assume XLA and stay safe
        return True


def kernel_choice(dtype=tf.float32, implementation=None):
    """Which implementation ``sru_recurrence`` uses now: "native" or "xla".

    ``implementation`` (default: ``$GAU_KERAS_SRU_KERNEL``, else "auto"):
    "auto" uses the native CPU kernel for
    float32/float64 when no GPU or TPU is visible and the call is not being
    compiled by XLA, and the XLA loops otherwise (also when the kernel cannot
    be built here); "native" requires the kernel (raises KernelUnavailable);
    "xla" always uses the XLA loops (plain graph loops when XLA fails)."""
    mode = implementation or os.environ.get("GAU_KERAS_SRU_KERNEL") or "auto"
    if mode not in ("auto", "native", "xla"):
        source = "implementation" if implementation else "GAU_KERAS_SRU_KERNEL"
        raise ValueError(f"sru_recurrence: {source}={mode!r}; expected 'auto', 'native' or 'xla'")
    if mode == "xla":
        return "xla"
    if mode == "native":
        kernels.load()
        return "native"
    if (tf.as_dtype(dtype) not in (tf.float32, tf.float64) or _in_xla_context()
            or tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU")):
        return "xla"
    try:
        kernels.load()
    except kernels.KernelUnavailable as reason:
        _warn_once(f"gau_keras: native SRU kernel unavailable, using the XLA loops: {reason}")
        return "xla"
    return "native"


@functools.lru_cache(maxsize=None)
def _warn_once(message):
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _core(U, x, weight_c, bias, c0, pad, scale_x, mask_c, bidirectional, implementation=None):
    """Differentiable in U, x, weight_c, bias, c0, scale_x; all in one compute dtype."""
    if kernel_choice(U.dtype, implementation) == "native":
        fwd, bwd = _native_pair(bidirectional)
    else:
        fwd, bwd = _compiled(U.dtype.name, bidirectional)

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
        # any one-element tensor will do, e.g. the official package's scale_x buffer of shape (1,)
        if scale.shape.num_elements() != 1:
            raise ValueError(f"sru_recurrence: scale_x must hold one value (a scalar or a tensor of shape "
                             f"(1,), ...), got shape {scale.shape}")
        scale = tf.reshape(scale, [])
    mask_c = tf.ones_like(c0) if dropout_mask is None else cast(dropout_mask)
    return U, x, weight_c, bias, c0, pad, scale, mask_c, out_dtype


def sru_recurrence(U, x, weight_c, bias, c0=None, mask_pad=None, scale_x=None,
                   dropout_mask=None, bidirectional=False, implementation=None):
    """The SRU elementwise recurrence with a fused custom gradient.

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
        implementation: "auto" (default, or ``$GAU_KERAS_SRU_KERNEL``): the fused
            C++ kernel on CPU, the XLA loops on GPU/TPU and inside XLA-compiled
            functions; "native" or "xla" to force one (see ``kernel_choice``).

    Returns:
        (h [B, L, dirs·d], c_last [B, dirs·d]) in U's dtype; float16/bfloat16
        are computed in float32, float64 in float64.
    """
    U, x, weight_c, bias, c0, pad, scale, mask_c, out_dtype = _prepare(
        U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional)
    h, c_last = _core(U, x, weight_c, bias, c0, pad, scale, mask_c, bidirectional, implementation)
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
