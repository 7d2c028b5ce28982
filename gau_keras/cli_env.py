"""The ``gau-keras`` command's environment, set before TensorFlow is imported: the one
place the project sets TensorFlow's C++ log level (``TF_CPP_MIN_LOG_LEVEL``).

``import gau_keras`` imports TensorFlow (it registers the serialisable
classes), and a console script imports the package before its ``main`` runs,
so this module is imported first thing by ``gau_keras/__init__.py``. When the
process is the command line (the ``gau-keras`` script or ``python -m
gau_keras``) it quiets TensorFlow's C++ log (``TF_CPP_MIN_LOG_LEVEL=3``: no
start-up notices, no "failed call to cuInit" on a CPU machine), unless the
user set ``TF_CPP_MIN_LOG_LEVEL``. The notices TensorFlow's libraries print
while they load, before that setting is read ("All log messages before
absl::InitializeLog() ...", "Could not find cuda drivers ...", on CPUs
where oneDNN's custom operations switch on "oneDNN custom operations are
on ..."), are held back
too; anything else written while TensorFlow loads is passed on. A script
of the checkout's ``pretrain/``, ``finetune/``, ``benchmarks/`` or
``examples/`` folders gets ``TF_CPP_MIN_LOG_LEVEL=2`` (no notices held
back): its first import of gau_keras, before TensorFlow's, sets it.
A library user's process is left alone.
"""

import os
import re
import sys

#: the variable TensorFlow's C++ log reads, once, when it loads: set it before (`default_tf_log_level`)
TF_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
#: TensorFlow's C++ log level of the command line (3: errors are raised as Python exceptions instead)
CLI_TF_LOG_LEVEL = "3"
#: TensorFlow's C++ log level of the checkout's scripts and of a command run in-process (2: no notices)
SCRIPT_TF_LOG_LEVEL = "2"
#: the checkout's folders of scripts (``python pretrain/pretrain.py``, ``python -m finetune``)
SCRIPT_FOLDERS = ("finetune", "pretrain", "benchmarks", "examples")
#: the folder holding this gau_keras package (a checkout's root when run from one)
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_tf_log_level(level=SCRIPT_TF_LOG_LEVEL):
    """Sets ``TF_CPP_MIN_LOG_LEVEL`` to ``level`` unless the user set it: the one place the project
    writes it. TensorFlow reads it once, as it loads: `quiet_tensorflow` calls this on ``import
    gau_keras``, before the package loads TensorFlow."""
    os.environ.setdefault(TF_LOG_LEVEL, level)


def is_checkout_script(main_file=None):
    """Whether this process runs a script of the checkout's ``SCRIPT_FOLDERS`` (``main_file``:
    the ``__main__`` module's file, by default this process's)."""
    if main_file is None:
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if not main_file:
        return False
    folder = os.path.dirname(os.path.abspath(main_file))
    return os.path.basename(folder) in SCRIPT_FOLDERS and os.path.dirname(folder) == CHECKOUT


def is_command_line(argv=None, orig_argv=None):
    """Whether this process runs the ``gau-keras`` command (script or ``python -m gau_keras``)."""
    argv = sys.argv if argv is None else argv
    orig_argv = getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv
    if argv and os.path.basename(argv[0]) in ("gau-keras", "gau-keras.exe"):
        return True
    return any(flag == "-m" and module == "gau_keras" for flag, module in zip(orig_argv, orig_argv[1:]))


#: what TensorFlow's native libraries print on loading, whatever TF_CPP_MIN_LOG_LEVEL says
LOAD_NOTICES = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called|cudart_stub\.cc|"
    r"cpu_feature_guard\.cc|To enable the following instructions|"
    r"Unable to register cu(DNN|FFT|BLAS) factory|computation_placer\.cc|"
    r"oneDNN custom operations are on"
)


def import_tensorflow_quietly():
    """Imports TensorFlow with the native stderr (file descriptor 2) held,
    then writes out what was printed meanwhile except ``LOAD_NOTICES``."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode("utf-8", "replace")
            kept = [line for line in text.splitlines(keepends=True) if not LOAD_NOTICES.search(line)]
            sys.stderr.write("".join(kept))


def quiet_tensorflow():
    """``TF_CPP_MIN_LOG_LEVEL`` for the command line (its load notices held back too) or a
    checkout's script, unless the user set it; a library user's process is left alone."""
    if TF_LOG_LEVEL in os.environ:
        return
    if is_checkout_script():
        default_tf_log_level(SCRIPT_TF_LOG_LEVEL)
        return
    if not is_command_line():
        return
    default_tf_log_level(CLI_TF_LOG_LEVEL)
    if os.environ.get("GAU_KERAS_TF_FREE") != "1" and "tensorflow" not in sys.modules:
        try:
            import_tensorflow_quietly()
        except OSError:  # no file descriptor 2 to hold: TensorFlow loads (later) as usual
            pass


quiet_tensorflow()
