"""Whole-model files under the names bert4keras-era code gives them.

Keras 3 writes and reads the Keras format only under a '.keras' name (and
legacy HDF5 under '.h5'), and weights only under '.weights.h5'; bert4keras's
examples save to 'test.model', 'best_model.h5' and 'best_model.weights'.
``save_model`` / ``save_weights`` write Keras 3's formats under any name,
atomically (a temporary file beside it, renamed into place), and
``load_model`` / ``load_weights`` read them whatever the name (a Keras 2
HDF5 weights file too), falling back to Keras's own loaders otherwise.
"""

import os
import shutil
import tempfile
import warnings
import zipfile

import keras

from gau_keras import keras_archive
from gau_keras.bert4keras import PORTING

__all__ = ["save_model", "load_model", "save_weights", "load_weights", "is_keras_file"]


def is_keras_file(path):
    """Whether ``path`` is a file in the Keras format (a zip with the model's config)."""
    if not os.path.isfile(path) or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return "config.json" in archive.namelist()


def _atomic(path, suffix, overwrite, write):
    """Runs ``write(temporary path ending in suffix)``, then renames the file to ``path``."""
    if not overwrite and os.path.exists(path):
        raise FileExistsError(f"save: {path!r} exists and overwrite=False")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=directory, prefix=".partial-", suffix=suffix)
    os.close(handle)
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _read_as(path, suffix, read):
    """``read(alias)`` with an alias of ``path`` whose name ends in ``suffix`` (Keras picks its
    reader by the name)."""
    with tempfile.TemporaryDirectory() as folder:
        alias = os.path.join(folder, "file" + suffix)
        try:
            os.symlink(os.path.abspath(path), alias)
        except OSError:
            shutil.copyfile(path, alias)
        return read(alias)


def _warn_format(method, save_format, path):
    if save_format not in (None, "keras", "h5"):
        warnings.warn(
            f"{method}: save_format={save_format!r} does not exist in Keras 3; {path!r} is written in "
            f"Keras 3's format (gau_keras reads it back under that name; {PORTING})",
            UserWarning,
            stacklevel=4,
        )


def save_weights(model, filepath, overwrite=True, save_format=None, **kwargs):
    """``model``'s weights in Keras 3's '.weights.h5' format at ``filepath`` (any name,
    e.g. bert4keras's 'best_model.weights'), written atomically."""
    path = os.fspath(filepath)
    _warn_format("save_weights", save_format, path)
    _atomic(
        path, ".weights.h5", overwrite, lambda target: keras.Model.save_weights(model, target, overwrite=True, **kwargs)
    )


def _is_keras2_file(path):
    """An HDF5 file in Keras 2's layout: weights (the root lists the layer names) or a whole
    model (its weights under 'model_weights')."""
    import h5py

    with h5py.File(path, "r") as f:
        return "layer_names" in f.attrs or "model_weights" in f


def load_weights(model, filepath, skip_mismatch=False, by_name=False, **kwargs):
    """Loads weights saved by ``save_weights`` (any name) or by Keras 2 (HDF5) into ``model``."""
    import h5py

    path = os.fspath(filepath)
    load = lambda alias: keras.Model.load_weights(model, alias, skip_mismatch=skip_mismatch, **kwargs)  # noqa: E731
    if by_name:
        raise ValueError(
            f"load_weights({path!r}, by_name=True): Keras 3 loads weights by layer structure only; "
            f"build the same model, or load a TF1 checkpoint by variable name "
            f"(load_weights_from_checkpoint; {PORTING})"
        )
    if not os.path.exists(path):
        raise FileNotFoundError(f"load_weights: {path!r} does not exist")
    if path.endswith((".weights.h5", ".keras")) or not os.path.isfile(path):
        return load(path)
    # any other name ('best_model.weights', 'x.h5'): the format by the content
    if zipfile.is_zipfile(path):
        return _read_as(path, ".keras", load)
    if h5py.is_hdf5(path):
        return _read_as(path, ".h5" if _is_keras2_file(path) else ".weights.h5", load)
    return load(path)


def save_model(model, filepath, overwrite=True, include_optimizer=True, save_format=None, **kwargs):
    """``model`` in the Keras format at ``filepath`` (any name), written atomically.

    ``include_optimizer=False`` leaves the optimizer and the compiled state out (the
    model loads uncompiled, as in Keras 2); a ``save_format`` other than 'keras' is
    answered with a warning, since Keras 3 writes this one format."""
    path = os.fspath(filepath)
    if save_format not in (None, "keras"):
        warnings.warn(
            f"save: save_format={save_format!r} does not exist in Keras 3; {path!r} is written in "
            f"the Keras format (gau_keras.backend.keras.models.load_model reads it; {PORTING})",
            UserWarning,
            stacklevel=3,
        )
    write = (
        (lambda target: keras.saving.save_model(model, target, **kwargs))
        if include_optimizer
        else (lambda target: _save_without_optimizer(model, target, **kwargs))
    )
    _atomic(path, ".keras", overwrite, write)


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
    if path.endswith(".keras") or os.path.isfile(path) and os.path.getsize(path) == 0:
        keras_archive.check(path, f"load_model: {path}")  # an empty or truncated file named as such
    if path.endswith(".keras") or not is_keras_file(path):
        return keras.models.load_model(path, custom_objects=custom_objects, compile=compile, safe_mode=safe_mode)
    return _read_as(
        path,
        ".keras",
        lambda alias: keras.models.load_model(
            alias, custom_objects=custom_objects, compile=compile, safe_mode=safe_mode
        ),
    )
