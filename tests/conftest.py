"""Shared pytest fixtures: seeds, the shared data folder, quiet TF logs; the
selection of the JAX pass.

The README's test command runs the suite on TensorFlow, then again with
``KERAS_BACKEND=jax``: that second pass runs the tests marked
``both_backends`` (the layer, backend, model, builder and optimizer modules,
and one fine-tuning and one pretraining run) and those marked ``jax_only``
(the Pallas kernel; skipped in the TensorFlow pass), and deselects the rest; tests
marked ``tensorflow_only`` are skipped there, and ``float64`` ones unless
JAX_ENABLE_X64 is set (JAX computes float64 in float32 otherwise). Test
files named on the command line run whole on any backend.
"""

import importlib.util
import os
import pathlib
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = pathlib.Path(os.environ.get("GAU_KERAS_DATA", REPO_ROOT.parent / "shared" / "data"))


NO_TENSORFLOW = textwrap.dedent('''
    import sys

    class _NoTensorFlow:
        """Fails every import of tensorflow (and tf_keras) as an absent package does."""

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("tensorflow", "tf_keras"):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, _NoTensorFlow())
''')


def without_tensorflow_env(folder):
    """Environment of a subprocess on a JAX host without TensorFlow (a GPU image, the device machine):
    KERAS_BACKEND=jax on the CPU, and a ``sitecustomize`` in ``folder`` that makes ``import
    tensorflow`` (and tf_keras) fail as it fails where TensorFlow is absent."""
    (folder / "sitecustomize.py").write_text(NO_TENSORFLOW, encoding="utf-8")
    path = os.pathsep.join([str(folder), str(REPO_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=path)


def load_benchmark(name):
    """The module of ``benchmarks/<name>.py`` (benchmarks are scripts, not a package)."""
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


@pytest.fixture(scope="session")
def head_kind_runs(tmp_path_factory):
    """(model dir, runs dir, {task: metrics record}): one task per head kind fine-tuned here on a
    tiny random GAU-alpha at dropout 0 (tests/finetune_utils.py), once for the test session."""
    from tests.finetune_utils import real_vocab_model_dir, run_head_kinds

    model_dir = real_vocab_model_dir(tmp_path_factory, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    root = tmp_path_factory.mktemp("head_kinds")
    return model_dir, root, run_head_kinds(root, model_dir)


@pytest.fixture(scope="session")
def requires_jax():
    """Skips a test that starts a JAX process where jax is not installed."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (pip install jax): the JAX backend cannot run here")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _seed():
    import keras

    keras.utils.set_random_seed(1234)
    yield


def _float64_is_float32():
    import keras

    if keras.backend.backend() != "jax":
        return False
    import jax

    return not jax.config.jax_enable_x64


def pytest_configure(config):
    """The bert4keras reference keeps its results in pytest's cache folder (the
    JAX pass of the README's test command reuses the TensorFlow pass's):
    tests/reference/harness.py. ``-p no:cacheprovider`` turns that off."""
    from tests.reference.harness import CACHE_ENV

    if getattr(config, "cache", None) is not None and CACHE_ENV not in os.environ:
        os.environ[CACHE_ENV] = str(config.cache.mkdir("bert4keras_reference"))


def pytest_report_header(config):
    import keras

    if keras.backend.backend() != "tensorflow" and _whole_suite(config):
        return (
            f"KERAS_BACKEND={keras.backend.backend()}: the tests marked both_backends run, the others are "
            f"deselected or not collected (tests/conftest.py)"
        )


def _whole_suite(config):
    """Whether pytest runs its testpaths (no test files named on the command line)."""
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS


def pytest_ignore_collect(collection_path, config):
    """On another backend than TensorFlow, a whole-suite run does not import
    the test modules that mark nothing ``both_backends`` (they would all be
    deselected): their imports alone cost the JAX pass ~10 s."""
    import keras

    if (
        keras.backend.backend() != "tensorflow"
        and _whole_suite(config)
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and not any(marker in collection_path.read_text(encoding="utf-8") for marker in ("both_backends", "jax_only"))
    ):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    """On TensorFlow: ``jax_only`` tests are skipped.  On another backend: only
    ``both_backends`` and ``jax_only`` tests run (of the whole suite);
    ``tensorflow_only`` ones are skipped, ``float64`` ones without float64."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        jax_only = pytest.mark.skip(
            reason="checks the JAX backend's own code: it runs in the JAX pass (KERAS_BACKEND=jax)"
        )
        for item in items:
            if "jax_only" in item.keywords:
                item.add_marker(jax_only)
        return
    selected = lambda item: "both_backends" in item.keywords or "jax_only" in item.keywords  # noqa: E731
    kept = [item for item in items if selected(item)]
    if _whole_suite(config) and len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not selected(item)])
        items[:] = kept
    skip = pytest.mark.skip(reason=f"uses TensorFlow's own machinery; Keras runs on {backend}")
    no_float64 = pytest.mark.skip(reason="needs float64 arithmetic: JAX computes it in float32 unless JAX_ENABLE_X64=1")
    for item in items:
        if "tensorflow_only" in item.keywords:
            item.add_marker(skip)
        elif "float64" in item.keywords and _float64_is_float32():
            item.add_marker(no_float64)
