"""The native kernel cache: a damaged library is detected and rebuilt, never loaded.

A stand-in compiler (a shell script that copies a library built earlier)
keeps the rebuilds fast; each check runs in a fresh process, since a library
once loaded stays loaded.
"""

import os
import pathlib
import shutil
import stat
import subprocess
import sys

import pytest

from gau_keras.recurrence.tensorflow import native as kernels
from tests.conftest import REPO_ROOT

CHOICE = "from gau_keras.recurrence import kernel_choice; print(kernel_choice())"


@pytest.fixture(scope="module")
def good_library():
    try:
        kernels.load()
    except kernels.KernelUnavailable as reason:
        pytest.skip(f"native SRU kernel not buildable here: {reason}")
    return kernels.library_path(os.environ.get("CXX") or "g++")


def _fake_compiler_env(folder, good_library):
    script = folder / "fake-cxx"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "fake-cxx 1.0"; exit 0; fi\n'
        'while [ "$#" -gt 0 ]; do if [ "$1" = "-o" ]; then out="$2"; fi; shift; done\n'
        f'cp "{good_library}" "$out"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return dict(os.environ, CXX=str(script), GAU_KERAS_KERNEL_CACHE=str(folder / "cache"), GAU_KERAS_SRU_KERNEL="auto")


@pytest.fixture
def fake_compiler_env(tmp_path, good_library):
    return _fake_compiler_env(tmp_path, good_library)


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory, good_library):
    """A cache the stand-in compiler filled in a fresh process (the first run of each damage test)."""
    env = _fake_compiler_env(tmp_path_factory.mktemp("built"), good_library)
    first = _run(env)
    assert first.returncode == 0 and first.stdout.strip() == "native", first.stderr[-2000:]
    return env


@pytest.fixture
def cache_copy(tmp_path, built_cache):
    """``built_cache``'s environment with a copy of its cache (the compiler, hence the key, unchanged)."""
    shutil.copytree(built_cache["GAU_KERAS_KERNEL_CACHE"], tmp_path / "cache")
    return dict(built_cache, GAU_KERAS_KERNEL_CACHE=str(tmp_path / "cache"))


def _run(env):
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", CHOICE],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _cached_library(env):
    libraries = list(pathlib.Path(env["GAU_KERAS_KERNEL_CACHE"]).rglob("sru_ops.so"))
    assert len(libraries) == 1
    return libraries[0]


# (random bytes of the right length fail the checksum as "truncated" does: one fresh process less)
@pytest.mark.parametrize("damage", ["truncated", "empty", "no checksum"])
def test_damaged_library_is_rebuilt_not_loaded(cache_copy, good_library, damage):
    library = _cached_library(cache_copy)
    assert kernels.checksum_path(library).read_text().strip() == kernels._sha256(good_library)
    data = library.read_bytes()
    if damage == "truncated":
        library.write_bytes(data[: len(data) // 3])
    elif damage == "empty":
        library.write_bytes(b"")
    else:
        kernels.checksum_path(library).unlink()
    again = _run(cache_copy)
    assert again.returncode == 0, again.stderr[-2000:]  # before: a bus error (SIGBUS) here
    assert again.stdout.strip() == "native"
    assert "rebuilding" in again.stderr and str(library) in again.stderr
    assert kernels._sha256(library) == kernels._sha256(good_library)


def test_intact_library_is_not_rebuilt(fake_compiler_env):
    assert _run(fake_compiler_env).returncode == 0
    library = _cached_library(fake_compiler_env)
    before = library.stat().st_mtime_ns
    with open(fake_compiler_env["CXX"], "a") as f:
        f.write("exit 1\n")  # any compiler call would now fail the build
    again = _run(fake_compiler_env)
    assert again.returncode == 0 and again.stdout.strip() == "native"
    assert "rebuilding" not in again.stderr and library.stat().st_mtime_ns == before
