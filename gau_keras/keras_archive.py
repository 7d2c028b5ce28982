"""A ``.keras`` file checked before Keras reads it, so that a missing, empty, truncated or damaged file
is one error naming it (Keras says "File not found" of an empty file and fails on a truncated one
with a zip or HDF5 traceback)."""

import os
import zipfile

#: what every Keras-format archive holds, besides its weights
MEMBERS = ("metadata.json", "config.json")
#: the weights file of the archive, by the Keras version that wrote it
WEIGHTS = ("model.weights.h5", "model.weights.npz")


def check(path, label):
    """Raises a one-line error naming ``label`` (e.g. "export: --keras FILE") unless ``path`` is a
    readable Keras-format zip archive with its config and weights.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, an empty or truncated file, or an archive lacking a member.
    """
    if os.path.isdir(path):
        raise ValueError(f"{label} is a folder, not a .keras file")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{label}: no such file")
    broken = f"{label} is not a .keras archive, or truncated"
    if os.path.getsize(path) == 0:
        raise ValueError(f"{broken} (the file is empty)")
    if not zipfile.is_zipfile(path):
        raise ValueError(broken)
    try:
        with zipfile.ZipFile(path) as archive:
            members = set(archive.namelist())
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"{broken} ({e})") from None
    missing = [m for m in MEMBERS if m not in members] + ([] if members & set(WEIGHTS) else [WEIGHTS[0]])
    if missing:
        raise ValueError(f"{broken} (it lacks {', '.join(missing)})")
    if damaged is not None:
        raise ValueError(f"{broken} (its member {damaged} is damaged)")
