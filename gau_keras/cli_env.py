"""The ``gau-keras`` command's environment, set before TensorFlow is imported.

``import gau_keras`` imports TensorFlow (it registers the serialisable
classes), and a console script imports the package before its ``main`` runs,
so this module is imported first thing by ``gau_keras/__init__.py``. When the
process is the command line (the ``gau-keras`` script or ``python -m
gau_keras``) it quiets TensorFlow's C++ log (``TF_CPP_MIN_LOG_LEVEL=3``: no
start-up notices, no "failed call to cuInit" on a CPU machine), unless the
user set ``TF_CPP_MIN_LOG_LEVEL``. A library user's process is left alone.
"""
import os
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


def quiet_tensorflow():
    """``TF_CPP_MIN_LOG_LEVEL`` for the command line, unless the user set it."""
    if is_command_line():
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", CLI_TF_LOG_LEVEL)


quiet_tensorflow()
