"""The recurrence's environment switches, each read (or set) here and nowhere else.

* ``GAU_KERAS_SRU_KERNEL``: the implementation ``sru_recurrence`` runs when the call names
  none (each backend's ``kernel_choice`` says which values it takes); read at every call, so
  a step traced under `sru_kernel_set` keeps the implementation it was traced with.
* ``GAU_KERAS_SRU_XLA``: ``0`` runs TensorFlow's XLA loops as plain graph loops (read once,
  when ``recurrence.tensorflow.xla_loops`` is imported).
* ``GAU_KERAS_KERNEL_CACHE``: the folder of the native kernel's built libraries (default
  ``~/.cache/gau_keras/kernels``).

Free of any backend.
"""

import contextlib
import os
import pathlib

SRU_KERNEL = "GAU_KERAS_SRU_KERNEL"
SRU_XLA = "GAU_KERAS_SRU_XLA"
KERNEL_CACHE = "GAU_KERAS_KERNEL_CACHE"


def sru_kernel(implementation=None):
    """The requested implementation and where it came from, as errors name it.

    Args:
        implementation: the call's ``implementation`` argument, or None.
    Returns:
        ``(mode, source)``: ``implementation`` and "implementation" when given, else
        ``$GAU_KERAS_SRU_KERNEL`` (or "auto" when unset) and the variable's name. The mode is
        not checked here: each backend knows its own.
    """
    if implementation:
        return implementation, "implementation"
    return os.environ.get(SRU_KERNEL) or "auto", SRU_KERNEL


@contextlib.contextmanager
def sru_kernel_set(mode):
    """``$GAU_KERAS_SRU_KERNEL`` is ``mode`` inside the block (steps traced there use it);
    the process's own value (or its absence) is restored after it."""
    before = os.environ.get(SRU_KERNEL)
    os.environ[SRU_KERNEL] = mode
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SRU_KERNEL, None)
        else:
            os.environ[SRU_KERNEL] = before


def sru_xla():
    """Whether TensorFlow's recurrence may XLA-compile its loops (``$GAU_KERAS_SRU_XLA`` is not "0")."""
    return os.environ.get(SRU_XLA, "1") != "0"


def kernel_cache_dir():
    """The native kernel's cache folder: ``$GAU_KERAS_KERNEL_CACHE``, else ``~/.cache/gau_keras/kernels``."""
    return pathlib.Path(os.environ.get(KERNEL_CACHE) or pathlib.Path.home() / ".cache" / "gau_keras" / "kernels")
