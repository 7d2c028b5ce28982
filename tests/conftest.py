"""Shared pytest fixtures: seeds, the shared data folder, quiet TF logs."""
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = pathlib.Path(os.environ.get("GAU_KERAS_DATA", REPO_ROOT.parent / "shared" / "data"))


def load_benchmark(name):
    """The module of ``benchmarks/<name>.py`` (benchmarks are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def shared_data():
    """Path of ../shared/data; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent (set GAU_KERAS_DATA to point at it)")
    return SHARED_DATA


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _seed():
    import keras
    keras.utils.set_random_seed(1234)
    yield


def pytest_collection_modifyitems(config, items):
    """``tensorflow_only`` tests are skipped when KERAS_BACKEND names another backend."""
    import keras

    if keras.backend.backend() == "tensorflow":
        return
    skip = pytest.mark.skip(reason=f"uses TensorFlow's own machinery; Keras runs on {keras.backend.backend()}")
    for item in items:
        if "tensorflow_only" in item.keywords:
            item.add_marker(skip)
