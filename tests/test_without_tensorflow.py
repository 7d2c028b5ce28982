"""gau_keras on a JAX host where TensorFlow is not installed (GPU and TPU images often have none).

A fresh process runs with ``KERAS_BACKEND=jax`` and a ``sitecustomize`` that
makes ``import tensorflow`` fail as it fails where TensorFlow is absent.  There
``import gau_keras``, building every model from a config, the SRUpp layer,
training steps (``fit``), a ``.keras`` round trip and ``benchmarks/srupp_gpu.py``
(tiny, the kernel interpreted) work without TensorFlow ever being imported; what needs it (the TF1
checkpoint, the TFRecord input, SavedModel export) says so in one line that
names the package to install.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO_ROOT, without_tensorflow_env

pytestmark = pytest.mark.jax_only

CHECKS = textwrap.dedent("""
    import json, sys, tempfile
    import numpy as np
    import keras
    import gau_keras
    from gau_keras import build_transformer_model
    from gau_keras.layers import SRUpp
    from gau_keras.pretrained import default_model_dir, model_files

    out = {"backend": keras.backend.backend()}
    config, checkpoint, vocab = model_files(default_model_dir())
    tokens = np.random.default_rng(0).integers(1, 100, (4, 8))
    for name in ("gau_alpha", "roformer_v2", "srupp"):
        model = build_transformer_model(config, None, model=name, with_mlm=True, num_hidden_layers=1)
        inputs = tokens if name == "srupp" else [tokens, np.zeros_like(tokens)]
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        history = model.fit(inputs, tokens, epochs=2, verbose=0)
        path = tempfile.mkdtemp() + "/model.keras"
        model.save(path)
        again = keras.models.load_model(path)
        out[name] = {"losses": history.history["loss"],
                     "reloaded": float(np.max(np.abs(again.predict(inputs, verbose=0)
                                                     - model.predict(inputs, verbose=0))))}
    layer = SRUpp(hidden_size=8, proj_size=4, num_layers=2, bidirectional=True)
    out["srupp_layer"] = list(layer(np.ones((2, 5, 16), "float32")).shape)
    errors = {}
    for what, action in (("checkpoint", lambda: build_transformer_model(config, checkpoint, model="gau_alpha")),
                         ("tfrecord", lambda: __import__("gau_keras.data.tfrecord")),
                         ("export", lambda: __import__("gau_keras.export", fromlist=["x"]).export_saved_model(
                             model, tempfile.mkdtemp()))):
        try:
            action()
            errors[what] = None
        except ImportError as error:
            errors[what] = str(error)
    out["errors"] = errors
    out["tensorflow_imported"] = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tf_keras"))
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return without_tensorflow_env(tmp_path_factory.mktemp("no_tensorflow"))


@pytest.fixture(scope="module")
def result(env):
    run = subprocess.run(
        [sys.executable, "-c", CHECKS], capture_output=True, text=True, env=env, timeout=600, cwd=REPO_ROOT
    )
    assert run.returncode == 0, run.stderr[-4000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def test_the_blocker_really_blocks_tensorflow(env):
    run = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True, text=True, env=env)
    assert run.returncode != 0 and "No module named 'tensorflow'" in run.stderr


def test_models_build_train_and_reload_without_tensorflow(result):
    assert result["backend"] == "jax"
    for name in ("gau_alpha", "roformer_v2", "srupp"):
        losses = result[name]["losses"]
        assert len(losses) == 2 and all(loss == loss for loss in losses), (name, losses)
        assert result[name]["reloaded"] <= 1e-6, name
    assert result["srupp_layer"] == [2, 5, 16]
    assert result["tensorflow_imported"] == []


@pytest.mark.parametrize(
    "what, purpose",
    [
        ("checkpoint", "reading or writing a TF1 checkpoint"),
        ("tfrecord", "TFRecord shards"),
        ("export", "SavedModel export"),
    ],
)
def test_what_needs_tensorflow_says_so_in_one_line(result, what, purpose):
    message = result["errors"][what]
    assert message is not None and "\n" not in message
    assert purpose in message and "needs TensorFlow" in message and "pip install" in message


def test_the_gpu_benchmark_runs_without_tensorflow(env, tmp_path):
    """benchmarks/srupp_gpu.py at one tiny shape (the kernel interpreted on this CPU): JSON lines and
    the table of every variant; no timing is asserted."""
    lines = tmp_path / "srupp_gpu.jsonl"
    run = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "srupp_gpu.py"),
            "--tiny",
            "--shapes",
            "2x12x16x8",
            "--dtypes",
            "float32",
            "--blocks",
            "32",
            "--json",
            str(lines),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=REPO_ROOT,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    parity = next(r for r in records if r["group"] == "parity")["max_relative_difference"]
    assert max(parity.values()) <= 2e-5, parity
    timed = {(r["group"], r["variant"]): r["ms"] for r in records if "ms" in r}
    assert set(timed) == {
        ("recurrence", "kernel"),
        ("recurrence", "kernel block 32"),
        ("recurrence", "scan"),
        ("train", "SRU++ kernel"),
        ("train", "SRU++ scan"),
        ("train", "Keras GRU"),
    }
    assert all(ms > 0 for ms in timed.values())
    rows = [line for line in run.stdout.splitlines() if line.startswith("| 2×12×16 (8) |")]
    assert len(rows) == len(timed)
