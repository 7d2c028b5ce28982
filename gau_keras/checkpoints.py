"""TF1 checkpoint I/O: read variables by name, write the original format.

The original bert4keras / Google-BERT checkpoints are TF1 ``Saver``
checkpoints: ``prefix.index`` + ``prefix.data-*`` (+ ``checkpoint`` state
file). Reading uses ``tf.train.load_checkpoint``; writing uses the ``SaveV2``
op, which produces exactly the files a TF1 ``Saver`` writes for the same
variable names (without a ``.meta`` graph, which no loader here needs).

Design notes: docs/models.md (The TF1 checkpoint).
"""

import os

import numpy as np

from gau_keras import optional
from gau_keras.errors import CheckpointError


def _tf():
    return optional.tensorflow("reading or writing a TF1 checkpoint")


def resolve_checkpoint(path):
    """Returns the checkpoint prefix for ``path`` (a prefix or a directory).

    Raises CheckpointError when ``path`` is not a TF checkpoint.
    """
    tf = _tf()
    path = os.fspath(path)
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
            if len(indexes) != 1:
                raise CheckpointError(
                    f"{path!r} is a directory without a unique TF checkpoint "
                    f"(found {len(indexes)} '*.index' files and no 'checkpoint' state file)"
                )
            latest = indexes[0][: -len(".index")]
        path = latest
    if not tf.io.gfile.exists(path + ".index"):
        hint = " (pass the prefix, without '.index')" if path.endswith(".index") else ""
        raise CheckpointError(f"{path!r} is not a TF checkpoint: there is no {path + '.index'!r}{hint}")
    return path


class CheckpointReader:
    """Reads variables of a TF checkpoint by name, with errors that name the file."""

    def __init__(self, path):
        tf = _tf()
        self.path = resolve_checkpoint(path)
        try:
            self._reader = tf.train.load_checkpoint(self.path)
        except (tf.errors.OpError, ValueError) as e:
            raise CheckpointError(f"cannot read TF checkpoint {self.path!r}: {e}") from e
        self.shapes = self._reader.get_variable_to_shape_map()

    def __contains__(self, name):
        return name in self.shapes

    def get(self, name):
        tf = _tf()
        if name not in self.shapes:
            raise CheckpointError(f"checkpoint {self.path!r} has no variable {name!r}")
        try:
            return self._reader.get_tensor(name)
        except (IndexError, ValueError, tf.errors.OpError) as e:  # a truncated or damaged data file
            data = tf.io.gfile.glob(self.path + ".data-*")
            raise CheckpointError(
                f"checkpoint {self.path!r}: variable {name!r} cannot be read from "
                f"{data[0] if len(data) == 1 else self.path + '.data-*'} "
                f"({type(e).__name__}: {e}); is the file truncated or damaged?"
            ) from None


def list_variables(path):
    """[(name, shape)] of a checkpoint, sorted by name."""
    tf = _tf()
    return sorted(tf.train.list_variables(resolve_checkpoint(path)))


def load_variable(path, name):
    """One variable of a checkpoint as a numpy array."""
    return CheckpointReader(path).get(name)


def save_checkpoint(prefix, variables, dtype=None):
    """Writes ``{name: array}`` as a TF1-format checkpoint at ``prefix``.

    Also writes/updates the ``checkpoint`` state file in the same directory,
    so the directory itself can be passed to loaders.
    """
    tf = _tf()
    prefix = os.fspath(prefix)
    directory = os.path.dirname(prefix) or "."
    tf.io.gfile.makedirs(directory)
    names = sorted(variables)
    tensors = [tf.convert_to_tensor(np.asarray(variables[n], dtype=dtype)) for n in names]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
    _write_state_file(directory, os.path.basename(prefix))
    return prefix


def _write_state_file(directory, name):
    """The text-proto ``checkpoint`` file TF1's Saver keeps beside checkpoints."""
    tf = _tf()
    state = f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n'
    with tf.io.gfile.GFile(os.path.join(directory, "checkpoint"), "w") as f:
        f.write(state)
