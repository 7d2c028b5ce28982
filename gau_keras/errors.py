"""The project's errors, one home for all (the ground floor: imports nothing of gau_keras).

Library code raises these, each message naming the argument, key, flag or
file at fault; only a command's ``main()`` turns one into its exit status and
its one-line message. Each is also the builtin it was before it moved here
(a `ConfigError` is a ValueError), so ``except ValueError`` keeps catching it.

    GauKerasError
      ConfigError        (ValueError)    a model or run config value that cannot be used
      DataFileError      (ValueError)    a data file refused as a whole, or a record that cannot be read
      CheckpointError    (ValueError)    a checkpoint missing, unreadable, not restoring or not fitting
      OutputDirError     (ValueError)    an output folder that cannot be written or holds others' files
        RunDirError                      a run directory that cannot be used (lock, other backend, full)
      DeviceError        (ValueError)    devices or a backend a run asks for that this process cannot give
      OptionError        (ValueError)    a command-line option value a command cannot use
"""


class GauKerasError(Exception):
    """Base of the project's errors: what a command reports as one line (exit status 2)."""


class ConfigError(GauKerasError, ValueError):
    """A model or run config value that cannot be used; the message names the key, the value and
    the file or the model."""


class DataFileError(GauKerasError, ValueError):
    """A data file refused as a whole (another task's records, mostly malformed records, only
    empty texts, shards that do not fit the config) or a record in it that cannot be read; the
    message names the file."""


class CheckpointError(GauKerasError, ValueError):
    """A checkpoint is missing, unreadable, does not restore, or does not fit the model."""


class OutputDirError(GauKerasError, ValueError):
    """An output folder that cannot be written, or that holds files the command must not
    replace; the message names it and the flag that gave it."""


class RunDirError(OutputDirError):
    """A run directory that cannot be used (not a writable folder, a ``.lock`` that is not
    the run's lock file, in use by another run, another backend's checkpoints, no space
    left); the message names it and the option."""


class DeviceError(GauKerasError, ValueError):
    """Devices or a backend that a run asks for (``--devices``, ``--tpu``, ``TF_CONFIG``,
    ``--no-xla``, ``KERAS_BACKEND``) and this process cannot give; the message names which."""


class OptionError(GauKerasError, ValueError):
    """A command-line option value a command cannot use; the message names the flag."""


def first_line(error):
    """The first line of ``error``'s message, or its class name when the message is empty: what a
    one-line error quotes of an exception raised below it (TensorFlow's, XLA's, a parser's)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
