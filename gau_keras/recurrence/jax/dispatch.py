"""``sru_recurrence`` on JAX: the fused Pallas kernel on GPU/TPU, the ``lax.scan`` pair elsewhere.

The choice is made per lowering platform (``jax.lax.platform_dependent``), not
by the host that traces: a step traced on a CPU and compiled or exported for a
GPU or TPU gets the kernel there.  ``implementation`` (or
``$GAU_KERAS_SRU_KERNEL``) overrides it: ``kernel_choice``.
"""

import jax
import jax.numpy as jnp

import gau_keras.recurrence.jax.pallas_kernel as pallas_kernel
import gau_keras.recurrence.jax.scan as scan
from gau_keras.recurrence.jax.prepare import compute_dtype, prepare
from gau_keras.recurrence.switches import sru_kernel

__all__ = ["sru_recurrence", "kernel_choice", "MODES"]

#: what ``implementation`` / $GAU_KERAS_SRU_KERNEL accept on JAX ("xla" is kept as an alias of "scan")
MODES = ("auto", "pallas", "scan", "xla")
#: the kernel's target on each platform that has one
KERNEL_PLATFORMS = {"cuda": "triton", "tpu": "mosaic"}


def _mode(implementation):
    """The requested mode, validated: "auto", "pallas" or "scan"."""
    mode, source = sru_kernel(implementation)
    if mode == "native":
        raise ValueError(
            f"sru_recurrence: {source}='native' is TensorFlow's C++ kernel; on the JAX backend "
            f"use 'auto', 'pallas' (the fused kernel) or 'scan' (the lax.scan pair)"
        )
    if mode not in MODES:
        raise ValueError(f"sru_recurrence: {source}={mode!r}; expected one of {', '.join(MODES)}")
    return "scan" if mode == "xla" else mode


def _kernel_takes(dtype):
    return jnp.dtype(dtype).name in pallas_kernel.SUPPORTED_DTYPES


def _kernel_platform(platform):
    """Whether ``platform`` (JAX's name: 'cpu', 'gpu', 'cuda', 'rocm', 'tpu') has the kernel:
    CUDA GPUs (Triton) and TPUs (Mosaic); a ROCm GPU runs the scan."""
    if platform == "gpu":
        try:
            platform = "rocm" if "rocm" in jax.devices("gpu")[0].client.platform_version.lower() else "cuda"
        except (RuntimeError, AttributeError, IndexError):
            return False
    return platform in KERNEL_PLATFORMS


def kernel_choice(dtype="float32", implementation=None, platform=None):
    """Which implementation ``sru_recurrence`` uses for ``dtype`` on ``platform`` (JAX's
    name: 'cpu', 'cuda', 'rocm', 'tpu', or 'gpu' for this host's GPUs; default: JAX's
    default backend): "pallas" or "scan".

    ``implementation`` (default ``$GAU_KERAS_SRU_KERNEL``, else "auto"): "auto"
    runs the kernel on CUDA GPUs and TPUs and the scan elsewhere (and for float64);
    "pallas" always runs the kernel (on a CPU in Pallas's interpreter) and raises
    ValueError for a dtype it does not take; "scan" (alias "xla") the scan pair;
    "native" (TensorFlow's C++ kernel) raises ValueError."""
    mode = _mode(implementation)
    if mode == "pallas" and not _kernel_takes(dtype):
        raise ValueError(
            f"sru_recurrence: implementation 'pallas' takes "
            f"{', '.join(pallas_kernel.SUPPORTED_DTYPES)} (its state is float32), "
            f"not {jnp.dtype(dtype).name}; use 'scan' (or 'auto') for it"
        )
    if mode != "auto":
        return mode
    platform = platform or jax.default_backend()
    return "pallas" if _kernel_platform(platform) and _kernel_takes(dtype) else "scan"


def _kernel_branch(target, p_args, tuning, interpret=False):
    """A function of the eight arrays running the kernel for ``target`` (Pallas's interpreter with
    ``interpret``); ``tuning``: the GPU plan's block and lookahead (None: the defaults)."""

    def run(U, x, weight_c, bias, c0, pad, scale, mask_c):
        p = pallas_kernel.plan(target=target, interpret=interpret, **p_args, **({} if target == "mosaic" else tuning))
        return pallas_kernel.recurrence(p, U, x, weight_c, bias, c0, pad, scale, mask_c)

    return run


def _check_tuning(mode, block, lookahead):
    """``block`` and ``lookahead`` are the GPU kernel's: checked here, whatever platform lowers the call."""
    for name, value in (("block", block), ("lookahead", lookahead)):
        if value is None:
            continue
        if mode == "scan":
            raise ValueError(
                f"sru_recurrence: {name}={value!r} tunes the Pallas kernel; implementation 'scan' has none"
            )
        if not isinstance(value, int) or value < 1 or (name == "block" and value & (value - 1)):
            kind = "a power of 2" if name == "block" else "a positive integer"
            raise ValueError(f"sru_recurrence: {name} must be {kind}, got {value!r}")


def _scan_branch(layout):
    def run(U, x, weight_c, bias, c0, pad, scale, mask_c):
        dtype = compute_dtype(U.dtype)
        h, c_last = scan.recurrence(layout, U.astype(dtype), x.astype(dtype), weight_c, bias, c0, pad, scale, mask_c)
        return h.astype(U.dtype), c_last

    return run


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
    block=None,
    lookahead=None,
):
    """``gau_keras.recurrence.sru_recurrence`` on JAX (same arguments and shapes):
    U [B, L, dirs·d·k], x [B, L, d_in], weight_c/bias [2·dirs·d], c0 [B, dirs·d],
    mask_pad [B, L] (True = padding), dropout_mask [B, dirs·d] →
    (h [B, L, dirs·d], c_last [B, dirs·d]) in U's dtype.  ``implementation``: see
    ``kernel_choice``; ``block`` and ``lookahead``: the GPU kernel's columns per
    program (a power of 2) and steps loaded ahead; None for the defaults (TPU
    blocks are Mosaic's 128 columns × 8 steps)."""
    mode = _mode(implementation)
    _check_tuning(mode, block, lookahead)
    p = prepare(U, x, weight_c, bias, c0, mask_pad, scale_x, dropout_mask, bidirectional, keep_io_dtype=True)
    kernel_choice(p.out_dtype, mode)  # refuses a dtype the kernel does not take when it is forced
    p_args = dict(
        layout=p.layout,
        batch=p.U.shape[0],
        length=p.U.shape[1],
        x_width=p.x.shape[-1],
        dtype=p.out_dtype,
        padded=mask_pad is not None,
    )
    scan_branch = _scan_branch(p.layout)
    # symbolic sizes (Keras's shape inference, shape-polymorphic export) cannot size a kernel's grid
    symbolic = not all(isinstance(size, int) for size in p.U.shape)
    if mode == "scan" or symbolic or (mode == "auto" and not _kernel_takes(p.out_dtype)):
        h, c_last = scan_branch(*p.arrays)
    else:
        tuning = {"block": block, "lookahead": lookahead}
        interpreter = _kernel_branch("triton", p_args, tuning, interpret=True)
        branches = {platform: _kernel_branch(target, p_args, tuning) for platform, target in KERNEL_PLATFORMS.items()}
        default = interpreter if mode == "pallas" else scan_branch
        h, c_last = jax.lax.platform_dependent(*p.arrays, default=default, **branches)
    return h.astype(p.out_dtype), c_last.astype(p.out_dtype)
