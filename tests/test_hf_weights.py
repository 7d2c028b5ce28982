"""gau_keras.hf_weights: Hugging Face weight files (safetensors, torch zips, shards) as numpy.

The fixtures in tests/fixtures/hf/ were written by transformers and torch
(tests/fixtures/make_hf_fixtures.py); these tests read them without torch.
"""

import importlib.util
import json
import os
import pathlib
import pickle
import shutil
import struct
import zipfile

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from gau_keras import hf_weights
from gau_keras.errors import CheckpointError

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "hf"
ARCHITECTURES = ("bert", "roberta", "albert", "electra", "roformer", "gpt2", "t5", "mt5")


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_restricted_reader_reads_what_torch_wrote_as_safetensors_holds_it(arch):
    safetensors = hf_weights.read_state_dict(FIXTURES / arch / "model.safetensors")
    torch_bin = hf_weights.read_state_dict(FIXTURES / arch / "pytorch_model.bin", use_torch=False)
    # torch.save keeps the tied matrices that save_pretrained drops from the safetensors file
    assert set(safetensors) <= set(torch_bin) and len(torch_bin) - len(safetensors) <= 3
    for name, value in safetensors.items():
        assert torch_bin[name].dtype == value.dtype == np.float32
        np.testing.assert_array_equal(torch_bin[name], value, err_msg=name)


def test_a_directory_is_read_from_its_safetensors_file_first(tmp_path):
    assert hf_weights.weight_file(FIXTURES / "bert").endswith("model.safetensors")
    shutil.copy(FIXTURES / "bert" / "pytorch_model.bin", tmp_path)
    assert hf_weights.weight_file(tmp_path).endswith("pytorch_model.bin")
    state = hf_weights.read_state_dict(tmp_path, use_torch=False)
    np.testing.assert_array_equal(
        state["bert.pooler.dense.weight"],
        load_file(FIXTURES / "bert" / "model.safetensors")["bert.pooler.dense.weight"],
    )


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_and_the_restricted_reader_agree():
    path = FIXTURES / "bert" / "pytorch_model.bin"
    by_torch, by_us = hf_weights.read_state_dict(path, use_torch=True), hf_weights.read_torch_zip(path)
    assert sorted(by_torch) == sorted(by_us)
    for name in by_us:
        np.testing.assert_array_equal(by_torch[name], by_us[name])


def _shard(tmp_path):
    """The bert fixture split into two safetensors shards and their index."""
    state = load_file(FIXTURES / "bert" / "model.safetensors")
    names = sorted(state)
    weight_map = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({name: state[name] for name in part}, str(tmp_path / shard))
        weight_map.update(dict.fromkeys(part, shard))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}), encoding="utf-8")
    return state, index


def test_shards_are_read_through_their_index(tmp_path):
    state, index = _shard(tmp_path)
    assert hf_weights.weight_file(tmp_path) == str(index)
    read = hf_weights.read_state_dict(tmp_path)
    assert sorted(read) == sorted(state)
    for name in state:
        np.testing.assert_array_equal(read[name], state[name])


def test_an_index_naming_a_missing_shard_is_refused_naming_it(tmp_path):
    _, index = _shard(tmp_path)
    os.remove(tmp_path / "model-00002-of-00002.safetensors")
    with pytest.raises(CheckpointError, match=r"names 'model-00002-of-00002.safetensors', which is not in"):
        hf_weights.read_state_dict(index)


def test_a_directory_without_weights_is_refused_naming_it(tmp_path):
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(CheckpointError, match=rf"{tmp_path.name}'? has no weights file"):
        hf_weights.read_state_dict(tmp_path)


@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin"])
@pytest.mark.parametrize("keep", [0.5, 0.999])
def test_a_truncated_file_is_refused_naming_it(tmp_path, name, keep):
    data = (FIXTURES / "bert" / name).read_bytes()
    path = tmp_path / name
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match=rf"{name}'.*truncated"):
        hf_weights.read_state_dict(path, use_torch=False)


def test_bfloat16_safetensors_are_widened_to_float32(tmp_path):
    values = np.array([[1.5, -2.0], [0.15625, 3e8]], np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, len(bits)]}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bits)
    read = hf_weights.read_state_dict(path)["w"]
    assert read.dtype == np.float32
    np.testing.assert_allclose(read, values, rtol=1e-2)


class _Exploit:
    """Pickles as a call of os.system (what a crafted checkpoint would run)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _torch_zip(path, payload):
    """A zip in torch's layout (archive/data.pkl) whose pickle is ``payload``."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
        archive.writestr("archive/version", "3\n")
    return path


@pytest.mark.parametrize(
    "state",
    [lambda marker: _Exploit(marker), lambda marker: {"bert.pooler.dense.bias": _Exploit(marker)}],
    ids=["top-level", "inside-the-state-dict"],
)
def test_a_pickle_naming_another_global_is_refused_and_nothing_runs(tmp_path, state):
    marker = tmp_path / "marker"
    path = _torch_zip(tmp_path / "pytorch_model.bin", pickle.dumps(state(marker), protocol=2))
    with pytest.raises(CheckpointError, match=r"names the global (posix|os|nt)\.system.*refused"):
        hf_weights.read_state_dict(path, use_torch=False)
    assert not marker.exists()


def test_allowed_globals_are_stand_ins_not_torch():
    for (module, name), stand_in in hf_weights.ALLOWED_GLOBALS.items():
        assert module in ("torch", "torch._utils", "collections"), (module, name)
        assert getattr(stand_in, "__module__", "") in ("gau_keras.hf_weights", "collections"), (module, name)


def test_a_storage_shorter_than_its_pickle_says_is_refused(tmp_path):
    source = FIXTURES / "bert" / "pytorch_model.bin"
    path = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, data[:-4] if item.filename.split("/")[-2:-1] == ["data"] else data)
    with pytest.raises(CheckpointError, match=r"pytorch_model.bin'.*storage '.*/data/\d+' holds \d+ elements"):
        hf_weights.read_torch_zip(path)


def test_a_zip_that_is_no_torch_checkpoint_is_refused(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(CheckpointError, match="not a torch checkpoint"):
        hf_weights.read_state_dict(path, use_torch=False)
    legacy = tmp_path / "legacy.bin"
    legacy.write_bytes(pickle.dumps({"a": 1}))  # what torch.save wrote before 1.6: a bare pickle
    with pytest.raises(CheckpointError, match="legacy.bin' is not a zip file"):
        hf_weights.read_state_dict(legacy, use_torch=False)


@pytest.mark.parametrize(
    "offset, size, stride",
    [(0, (2, 3), (3, -1)), (-4, (2,), (1,)), (0, (2, 3), (3,)), (2, (2, 3), (3, 1))],
    ids=["negative-stride", "negative-offset", "rank-mismatch", "past-the-end"],
)
def test_a_tensor_is_only_a_view_inside_its_storage(offset, size, stride):
    """The unpickler's stand-in for torch's tensor rebuild: a crafted pickle's offset, sizes and
    strides cannot make it read outside the storage's memory."""
    storage = np.arange(6, dtype=np.float32)
    with pytest.raises(CheckpointError, match="not a view of a storage|does not fit its storage"):
        hf_weights._rebuild_tensor(storage, offset, size, stride)
    np.testing.assert_array_equal(hf_weights._rebuild_tensor(storage, 0, (3, 2), (1, 3)), storage.reshape(2, 3).T)
