"""gau_keras.recurrence.switches: the recurrence's environment switches, read in one place."""

import os
import pathlib

import pytest

from gau_keras.recurrence import switches


def test_sru_kernel_names_where_the_mode_came_from(monkeypatch):
    monkeypatch.delenv(switches.SRU_KERNEL, raising=False)
    assert switches.sru_kernel() == ("auto", "GAU_KERAS_SRU_KERNEL")
    monkeypatch.setenv(switches.SRU_KERNEL, "xla")
    assert switches.sru_kernel() == ("xla", "GAU_KERAS_SRU_KERNEL")
    assert switches.sru_kernel("native") == ("native", "implementation")


@pytest.mark.parametrize("before", [None, "native"])
def test_sru_kernel_set_restores_the_processs_value(before, monkeypatch):
    if before is None:
        monkeypatch.delenv(switches.SRU_KERNEL, raising=False)
    else:
        monkeypatch.setenv(switches.SRU_KERNEL, before)
    with pytest.raises(RuntimeError), switches.sru_kernel_set("xla"):
        assert switches.sru_kernel() == ("xla", "GAU_KERAS_SRU_KERNEL")
        raise RuntimeError("the block fails")
    assert os.environ.get(switches.SRU_KERNEL) == before


def test_sru_xla_and_the_kernel_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(switches.SRU_XLA, raising=False)
    assert switches.sru_xla()
    monkeypatch.setenv(switches.SRU_XLA, "0")
    assert not switches.sru_xla()
    monkeypatch.delenv(switches.KERNEL_CACHE, raising=False)
    assert switches.kernel_cache_dir() == pathlib.Path.home() / ".cache" / "gau_keras" / "kernels"
    monkeypatch.setenv(switches.KERNEL_CACHE, str(tmp_path))
    assert switches.kernel_cache_dir() == tmp_path
