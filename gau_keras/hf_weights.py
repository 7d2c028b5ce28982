"""Hugging Face weight files read as ``{name: numpy array}``, with no knowledge of any model.

A Hugging Face model directory holds ``config.json`` and its weights in one of four layouts:
``model.safetensors``, ``pytorch_model.bin``, or either split into shards listed by
``model.safetensors.index.json`` / ``pytorch_model.bin.index.json`` (``weight_map``: tensor
name -> shard file). ``read_state_dict(path)`` reads any of them (safetensors first).

safetensors files are read through the ``safetensors`` package's numpy API (bfloat16, which
numpy lacks, from the file's own header). A ``pytorch_model.bin`` is a zip of a pickled state
dict and one raw file per storage: ``torch.load(..., weights_only=True)`` reads it where torch
is installed; elsewhere ``read_torch_zip`` unpickles it with an allow-list of the globals a
state dict needs (``ALLOWED_GLOBALS``), each replaced by a numpy stand-in, so that nothing of
torch's, nor anything a crafted pickle names, is imported, constructed or called. Every error
is a ``CheckpointError`` naming the file (and the tensor or global at fault).
"""

import collections
import importlib
import json
import os
import pickle
import struct
import zipfile

import numpy as np

from gau_keras.errors import CheckpointError

SAFETENSORS = "model.safetensors"
TORCH_BIN = "pytorch_model.bin"
#: the weight files of a directory, in the order they are looked for (an index means shards)
WEIGHT_FILES = (SAFETENSORS, SAFETENSORS + ".index.json", TORCH_BIN, TORCH_BIN + ".index.json")

#: torch's storage classes by name -> numpy dtype of their elements ('bfloat16' widened on read)
TORCH_STORAGES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}


def weight_file(directory):
    """The weights file (or shard index) of a Hugging Face model directory: the first of
    ``WEIGHT_FILES`` it holds; a ``CheckpointError`` naming the directory when it holds none."""
    directory = os.fspath(directory)
    for name in WEIGHT_FILES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    raise CheckpointError(f"Hugging Face model directory {directory!r} has no weights file (looked for {WEIGHT_FILES})")


def read_state_dict(path, use_torch=None):
    """``{tensor name: numpy array}`` of a Hugging Face weights file, shard index or directory.

    Args:
        path: a directory (its ``weight_file``), a ``*.safetensors`` or ``*.bin`` file, or a
            ``*.index.json`` listing shards.
        use_torch: read ``.bin`` files with ``torch.load`` (True), with the restricted reader
            (False), or with torch when it is installed (None).
    Returns:
        a dict of numpy arrays (bfloat16 tensors as float32).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = weight_file(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"Hugging Face weights file {path!r} does not exist")
    if path.endswith(".index.json"):
        return _read_shards(path, use_torch)
    if path.endswith(".safetensors"):
        return read_safetensors(path)
    return read_torch_bin(path, use_torch)


def _read_shards(index_path, use_torch):
    """The union of the shards a ``*.index.json`` names (its ``weight_map``)."""
    try:
        with open(index_path, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(
            f"shard index {index_path!r} cannot be read (a JSON object with a 'weight_map'): {e}"
        ) from None
    directory = os.path.dirname(index_path)
    state = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = os.path.join(directory, shard)
        if not os.path.isfile(shard_path):
            raise CheckpointError(f"shard index {index_path!r} names {shard!r}, which is not in {directory!r}")
        state.update(read_state_dict(shard_path, use_torch))
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise CheckpointError(f"shard index {index_path!r} lists tensors its shards lack: {missing[:5]}")
    return state


# ------------------------------------------------------------------------------ safetensors
def read_safetensors(path):
    """``{name: array}`` of a ``.safetensors`` file (the ``safetensors`` package's numpy API;
    bfloat16 tensors, which numpy lacks, widened to float32 from the file's bytes)."""
    header, start = _safetensors_header(path)
    try:
        from safetensors import safe_open
    except ImportError as e:
        raise ImportError(f"gau_keras: reading {path!r} needs safetensors ({e}); pip install safetensors") from None
    state = {}
    bf16 = {name for name, info in header.items() if name != "__metadata__" and info["dtype"] == "BF16"}
    try:
        with safe_open(path, framework="numpy") as f:
            for name in f.keys():
                if name not in bf16:
                    state[name] = f.get_tensor(name)
    except Exception as e:  # the package's own SafetensorError (a truncated or damaged file)
        raise CheckpointError(f"cannot read safetensors file {path!r}: {e}") from None
    if bf16:
        with open(path, "rb") as f:
            for name in bf16:
                begin, end = header[name]["data_offsets"]
                f.seek(start + begin)
                raw = np.frombuffer(f.read(end - begin), np.uint16)
                state[name] = _bfloat16_to_float32(raw).reshape(header[name]["shape"])
    return state


def _safetensors_header(path):
    """(the JSON header, the offset its data starts at) of a safetensors file; an error naming the
    file when the header or the data it describes is cut short."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
        if length is None or 8 + length > size:
            raise CheckpointError(f"safetensors file {path!r} is truncated (its header is cut short)")
        try:
            header = json.loads(f.read(length))
        except ValueError as e:
            raise CheckpointError(f"safetensors file {path!r} has a damaged header: {e}") from None
    end = max((info["data_offsets"][1] for name, info in header.items() if name != "__metadata__"), default=0)
    if 8 + length + end > size:
        raise CheckpointError(
            f"safetensors file {path!r} is truncated: {size} bytes, its header describes {8 + length + end}"
        )
    return header, 8 + length


def _bfloat16_to_float32(raw):
    """uint16 bfloat16 bit patterns -> float32 (bfloat16 is the top half of a float32)."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


# ------------------------------------------------------------------------- pytorch_model.bin
def read_torch_bin(path, use_torch=None):
    """``{name: array}`` of a ``pytorch_model.bin`` (see ``read_state_dict`` for ``use_torch``)."""
    if use_torch is None:
        use_torch = importlib.util.find_spec("torch") is not None
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{path!r} is not a zip file: a truncated file, or torch's legacy (pre-1.6) format, "
            f"which can be read only by re-saving it with torch.save"
        )
    return _read_with_torch(path) if use_torch else read_torch_zip(path)


def _read_with_torch(path):
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch's UnpicklingError, RuntimeError of a damaged zip, ...
        raise CheckpointError(f"torch cannot read {path!r}: {type(e).__name__}: {e}") from None
    return {
        name: (value.float() if value.dtype == torch.bfloat16 else value).numpy()
        for name, value in state.items()
        if isinstance(value, torch.Tensor)
    }


class _StateDictUnpickler(pickle.Unpickler):
    """Unpickles a state dict with numpy stand-ins for the allowed globals; any other global is
    refused before anything is imported."""

    def __init__(self, file, archive, prefix, path):
        super().__init__(file)
        self.archive, self.prefix, self.path = archive, prefix, path
        self.storages = {}

    def find_class(self, module, name):
        stand_in = ALLOWED_GLOBALS.get((module, name))
        if stand_in is None:
            raise CheckpointError(
                f"{self.path!r}: the pickle names the global {module}.{name}, which a state dict of "
                f"tensors does not need; refused (nothing was executed)"
            )
        return stand_in

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _Storage)):
            raise CheckpointError(f"{self.path!r}: a persistent id {pid!r} that is not a tensor storage; refused")
        _, storage, key, _, numel = pid
        if key not in self.storages:
            member = f"{self.prefix}data/{key}"
            try:
                raw = self.archive.read(member)
            except (KeyError, zipfile.BadZipFile, EOFError, OSError) as e:
                raise CheckpointError(
                    f"{self.path!r}: storage {member!r} cannot be read ({e}); is it truncated?"
                ) from None
            array = np.frombuffer(raw, np.uint16 if storage.dtype == "bfloat16" else storage.dtype)
            if array.size != numel:
                raise CheckpointError(
                    f"{self.path!r}: storage {member!r} holds {array.size} elements, the pickle says {numel}"
                )
            self.storages[key] = _bfloat16_to_float32(array) if storage.dtype == "bfloat16" else array
        return self.storages[key]


class _Storage:
    """Stands in for a torch storage class: only the dtype of its elements."""

    def __init__(self, dtype):
        self.dtype = dtype


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    """torch's ``_rebuild_tensor_v2`` on a numpy storage: the strided view, copied."""
    if not isinstance(storage, np.ndarray):
        raise CheckpointError(f"a tensor rebuilt from {type(storage).__name__}, not a storage; refused")
    size, stride = tuple(size), tuple(stride)
    if not all(isinstance(v, int) and v >= 0 for v in (offset, *size, *stride)) or len(size) != len(stride):
        # as_strided reads wherever these point: only a view inside the storage is built
        raise CheckpointError(f"a tensor of shape {size}, strides {stride}, offset {offset}: not a view of a storage")
    if size and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= storage.size:
        raise CheckpointError(f"a tensor of shape {size} does not fit its storage of {storage.size} elements")
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], size, tuple(s * item for s in stride), writeable=False)
    return np.array(view)


def _rebuild_parameter(data, requires_grad=False, hooks=None):
    """torch's ``_rebuild_parameter``: the tensor itself."""
    return data


#: the globals a state-dict pickle may name: (module, name) -> its numpy stand-in
ALLOWED_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): _Storage(dtype) for name, dtype in TORCH_STORAGES.items()},
}


def read_torch_zip(path):
    """``{name: array}`` of a torch zip checkpoint without torch: its ``data.pkl`` unpickled with
    only ``ALLOWED_GLOBALS`` (a pickle naming any other is refused, naming it)."""
    try:
        archive = zipfile.ZipFile(path)
        pickles = [n for n in archive.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointError(f"{path!r} is a zip without one '<name>/data.pkl': not a torch checkpoint")
        prefix = pickles[0][: -len("data.pkl")]
        with archive.open(pickles[0]) as f:
            state = _StateDictUnpickler(f, archive, prefix, path).load()
    except (zipfile.BadZipFile, EOFError, pickle.UnpicklingError, OSError) as e:
        raise CheckpointError(
            f"cannot read torch checkpoint {path!r} ({type(e).__name__}: {e}); is it truncated?"
        ) from None
    except (TypeError, ValueError) as e:  # an allowed global called the wrong way (a storage called)
        raise CheckpointError(f"{path!r}: the pickle is not a state dict of tensors ({e}); refused") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path!r} holds a {type(state).__name__}, not a state dict")
    return {name: value for name, value in state.items() if isinstance(value, np.ndarray)}
