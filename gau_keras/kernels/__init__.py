"""Native CPU kernels, compiled on first use against the installed TensorFlow.

``load()`` returns the module of ops from ``sru_ops.cc`` (the fused SRU
recurrence used by `gau_keras.recurrence` on CPU).  The shared library is built
once with the system C++ compiler (``$CXX``, else ``g++``) and TensorFlow's own
compile and link flags, into a cache folder keyed by the source, TensorFlow's
version, the compiler and the CPU's vector extensions:
``$GAU_KERAS_KERNEL_CACHE`` or ``~/.cache/gau_keras/kernels``.  Concurrent
first uses (e.g. test workers) wait on a file lock instead of compiling twice.
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

    return ([compiler, "-std=c++17", "-O3", "-DNDEBUG", "-w", "-shared", "-fPIC", *_cpu_flags(), str(SOURCE),
             "-o", str(output)] + list(tf.sysconfig.get_compile_flags()) + list(tf.sysconfig.get_link_flags()))


def _cache_dir():
    root = os.environ.get("GAU_KERAS_KERNEL_CACHE") or pathlib.Path.home() / ".cache" / "gau_keras" / "kernels"
    return pathlib.Path(root)


def library_path(compiler):
    """Where the library for this source, TensorFlow, compiler and CPU lives in the cache."""
    import tensorflow as tf

    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), tf.__version__.encode(), shlex.join(_build_command(compiler, "out")).encode(),
                 subprocess.run([compiler, "--version"], capture_output=True).stdout):
        key.update(part)
    return _cache_dir() / key.hexdigest()[:16] / "sru_ops.so"


def _compile(compiler, target):
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same library
        if target.exists():
            return
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            partial = pathlib.Path(tmp) / target.name
            result = subprocess.run(_build_command(compiler, partial), capture_output=True, text=True)
            if result.returncode != 0:
                raise KernelUnavailable(f"building {SOURCE.name} with {compiler} failed (exit {result.returncode}):\n"
                                        + result.stderr[-3000:])
            os.replace(partial, target)  # atomic: readers never see a half-written library


@functools.lru_cache(maxsize=None)
def load():
    """The loaded op module (``gau_keras_sru_forward``, ``gau_keras_sru_backward``); raises KernelUnavailable."""
    import tensorflow as tf

    compiler = os.environ.get("CXX") or "g++"
    if shutil.which(compiler) is None:
        raise KernelUnavailable(f"no C++ compiler {compiler!r} on PATH (set $CXX)")
    try:
        target = library_path(compiler)
        if not target.exists():
            _compile(compiler, target)
        return tf.load_op_library(str(target))
    except (OSError, tf.errors.OpError) as error:
        raise KernelUnavailable(f"{SOURCE.name}: {type(error).__name__}: {error}") from error
