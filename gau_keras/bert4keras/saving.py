"""Whole-model files under the names bert4keras-era code gives them.

Keras 3 writes and reads the Keras format only under a '.keras' name (and
legacy HDF5 under '.h5'); bert4keras's examples save to 'test.model' or
'best_model.h5'. ``save_model`` writes the Keras format under any name,
atomically (a temporary file beside it, renamed into place), and
``load_model`` reads a Keras-format file whatever its name, falling back to
Keras's own loader for real HDF5 files and '.keras' names.
"""
import os
import shutil
import tempfile
import warnings
import zipfile

import keras

from gau_keras.bert4keras import PORTING

__all__ = ["save_model", "load_model", "is_keras_file"]


def is_keras_file(path):
    """Whether ``path`` is a file in the Keras format (a zip with the model's config)."""
    if not os.path.isfile(path) or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return "config.json" in archive.namelist()


def save_model(model, filepath, overwrite=True, include_optimizer=True, save_format=None, **kwargs):
    """``model`` in the Keras format at ``filepath`` (any name), written atomically.

    ``include_optimizer=False`` leaves the optimizer and the compiled state out (the
    model loads uncompiled, as in Keras 2); a ``save_format`` other than 'keras' is
    answered with a warning, since Keras 3 writes this one format."""
    path = os.fspath(filepath)
    if save_format not in (None, "keras"):
        warnings.warn(f"save: save_format={save_format!r} does not exist in Keras 3; {path!r} is written in "
                      f"the Keras format (gau_keras.backend.keras.models.load_model reads it; {PORTING})",
                      UserWarning, stacklevel=3)
    if not overwrite and os.path.exists(path):
        raise FileExistsError(f"save: {path!r} exists and overwrite=False")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=directory, prefix=".partial-", suffix=".keras")
    os.close(handle)
    try:
        if include_optimizer:
            keras.saving.save_model(model, partial, **kwargs)
        else:
            _save_without_optimizer(model, partial, **kwargs)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _save_without_optimizer(model, path, **kwargs):
    optimizer, compiled = getattr(model, "optimizer", None), getattr(model, "compiled", False)
    model.optimizer, model.compiled = None, False
    try:
        keras.saving.save_model(model, path, **kwargs)
    finally:
        model.optimizer, model.compiled = optimizer, compiled


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """``keras.models.load_model`` that also reads a Keras-format file saved under
    another name than '.keras' (``save_model`` above, or a renamed file)."""
    path = os.fspath(filepath)
    if path.endswith(".keras") or not is_keras_file(path):
        return keras.models.load_model(path, custom_objects=custom_objects, compile=compile, safe_mode=safe_mode)
    with tempfile.TemporaryDirectory() as folder:
        alias = os.path.join(folder, "model.keras")     # Keras 3 recognises its format by this suffix
        try:
            os.symlink(os.path.abspath(path), alias)
        except OSError:
            shutil.copyfile(path, alias)
        return keras.models.load_model(alias, custom_objects=custom_objects, compile=compile, safe_mode=safe_mode)
