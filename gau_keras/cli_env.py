"""The ``gau-keras`` command's environment, set before TensorFlow is imported.

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
too; anything else written while TensorFlow loads is passed on.
A library user's process is left alone.
"""
import os
import re
import sys

#: TensorFlow's C++ log level of the command line (3: errors are raised as Python exceptions instead)
CLI_TF_LOG_LEVEL = "3"


def is_command_line(argv=None, orig_argv=None):
    """Whether this process runs the ``gau-keras`` command (script or ``python -m gau_keras``)."""
    argv = sys.argv if argv is None else argv
    orig_argv = getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv
    if argv and os.path.basename(argv[0]) in ("gau-keras", "gau-keras.exe"):
        return True
    return any(flag == "-m" and module == "gau_keras" for flag, module in zip(orig_argv, orig_argv[1:]))


#: what TensorFlow's native libraries print on loading, whatever TF_CPP_MIN_LOG_LEVEL says
LOAD_NOTICES = re.compile(r"All log messages before absl::InitializeLog\(\) is called|cudart_stub\.cc|"
                          r"cpu_feature_guard\.cc|To enable the following instructions|"
                          r"Unable to register cu(DNN|FFT|BLAS) factory|computation_placer\.cc|"
                          r"oneDNN custom operations are on")


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
    """``TF_CPP_MIN_LOG_LEVEL`` for the command line, unless the user set it."""
    if not is_command_line() or "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = CLI_TF_LOG_LEVEL
    if os.environ.get("GAU_KERAS_TF_FREE") != "1" and "tensorflow" not in sys.modules:
        try:
            import_tensorflow_quietly()
        except OSError:     # no file descriptor 2 to hold: TensorFlow loads (later) as usual
            pass


quiet_tensorflow()
