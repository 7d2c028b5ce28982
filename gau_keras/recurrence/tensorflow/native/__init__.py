"""The native CPU kernel of the recurrence: builder and bridge.

``sru_ops.cc`` (beside this file) fuses the forward and the backward pass: one
pass over time per (batch row, direction) chain, chains spread over the CPU
threads. ``pair(layout)`` gives its (forward, backward) with the signatures of
the XLA pair; ``load()`` returns the module of ops, compiled on first use
against the installed TensorFlow.  The shared library is built
once with the system C++ compiler (``$CXX``, else ``g++``) and TensorFlow's own
compile and link flags, into a cache folder keyed by the source, TensorFlow's
version, the compiler and the CPU's vector extensions:
``$GAU_KERAS_KERNEL_CACHE`` or ``~/.cache/gau_keras/kernels``.  Concurrent
first uses (e.g. test workers) wait on a file lock instead of compiling twice.
A SHA-256 of the library is written beside it after a successful build and
checked before every load: a truncated or otherwise damaged library (which
``dlopen`` would map and crash on with a bus error) is rebuilt instead.
When no compiler is available or the build fails, ``load()`` raises
`KernelUnavailable` with the compiler's message; `gau_keras.recurrence` then
uses its XLA loops.
"""

import fcntl
import functools
import hashlib
import os
import pathlib
import platform
import shlex
import shutil
import subprocess
import tempfile
import warnings

from gau_keras.recurrence.switches import kernel_cache_dir

SOURCE = pathlib.Path(__file__).with_name("sru_ops.cc")


class KernelUnavailable(RuntimeError):
    """The native kernels could not be built or loaded here (the message says why)."""


def _cpu_flags():
    """Vector-extension flags for the compiler: AVX2 + FMA when this x86 CPU has both."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    try:
        info = pathlib.Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return ["-mavx2", "-mfma"] if {"avx2", "fma"} <= set(flags) else []


def _build_command(compiler, output):
    import tensorflow as tf

    return (
        [
            compiler,
            "-std=c++17",
            "-O3",
            "-DNDEBUG",
            "-w",
            "-shared",
            "-fPIC",
            *_cpu_flags(),
            str(SOURCE),
            "-o",
            str(output),
        ]
        + list(tf.sysconfig.get_compile_flags())
        + list(tf.sysconfig.get_link_flags())
    )


def library_path(compiler):
    """Where the library for this source, TensorFlow, compiler and CPU lives in the cache."""
    import tensorflow as tf

    key = hashlib.sha256()
    for part in (
        SOURCE.read_bytes(),
        tf.__version__.encode(),
        shlex.join(_build_command(compiler, "out")).encode(),
        subprocess.run([compiler, "--version"], capture_output=True).stdout,
    ):
        key.update(part)
    return kernel_cache_dir() / key.hexdigest()[:16] / "sru_ops.so"


def checksum_path(target):
    """The file beside a cached library that holds its SHA-256."""
    return target.with_name(target.name + ".sha256")


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _damage(target):
    """Why the cached library cannot be loaded safely, or None if it is intact."""
    if not target.exists():
        return "missing"
    checksum = checksum_path(target)
    if not checksum.exists():
        return f"{target} has no checksum file {checksum.name} (an interrupted or older build)"
    recorded = checksum.read_text(encoding="ascii", errors="replace").strip()
    actual = _sha256(target)
    if recorded != actual:
        return f"{target} does not match its checksum (size {target.stat().st_size} bytes; damaged or truncated)"
    return None


def _compile(compiler, target):
    """Builds the library at ``target`` unless an intact one is there (rebuilding a damaged one)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same library
        damage = _damage(target)
        if damage is None:
            return
        if damage != "missing":
            warnings.warn(f"gau_keras: kernel cache: {damage}; rebuilding it", RuntimeWarning, stacklevel=3)
            target.unlink(missing_ok=True)
        checksum_path(target).unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            partial = pathlib.Path(tmp) / target.name
            result = subprocess.run(_build_command(compiler, partial), capture_output=True, text=True)
            if result.returncode != 0:
                raise KernelUnavailable(
                    f"building {SOURCE.name} with {compiler} failed (exit {result.returncode}):\n"
                    + result.stderr[-3000:]
                )
            digest = _sha256(partial)
            os.replace(partial, target)  # atomic: readers never see a half-written library
            partial_checksum = pathlib.Path(tmp) / "checksum"
            partial_checksum.write_text(digest + "\n", encoding="ascii")
            os.replace(partial_checksum, checksum_path(target))


@functools.cache
def load():
    """The loaded op module (``gau_keras_sru_forward``, ``gau_keras_sru_backward``); raises KernelUnavailable."""
    import tensorflow as tf

    compiler = os.environ.get("CXX") or "g++"
    if shutil.which(compiler) is None:
        raise KernelUnavailable(f"no C++ compiler {compiler!r} on PATH (set $CXX)")
    try:
        target = library_path(compiler)
        if _damage(target) is not None:
            _compile(compiler, target)
        return tf.load_op_library(str(target))
    except (OSError, tf.errors.OpError) as error:
        raise KernelUnavailable(f"{SOURCE.name}: {type(error).__name__}: {error}") from error


def pair(layout):
    """(forward, backward) of the fused C++ kernels (``sru_ops.cc``), with the XLA
    pair's signatures; their c_seq is batch-major [B, L, dirs·d]."""
    import tensorflow as tf

    ops = load()
    bidirectional = layout.bidirectional

    def forward(U, x, weight_c, bias, c0, pad, scale_x, mask_c):
        return ops.gau_keras_sru_forward(U, x, weight_c, bias, c0, pad, scale_x, mask_c, bidirectional=bidirectional)

    def backward(U, x, weight_c, bias, c0, pad, scale_x, mask_c, c_seq, dh, dc_last):
        dU, dx, dw_rows, db_rows, dc0, dscale_rows = ops.gau_keras_sru_backward(
            U, x, weight_c, bias, c0, pad, scale_x, mask_c, c_seq, dh, dc_last, bidirectional=bidirectional
        )
        # per-batch-row partial sums (dscale_rows is all zeros when k = 4, which has no scale_x term)
        return (dU, dx, tf.reduce_sum(dw_rows, 0), tf.reduce_sum(db_rows, 0), dc0, tf.reduce_sum(dscale_rows))

    return forward, backward
