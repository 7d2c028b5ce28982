"""Fine-tuning under KERAS_BACKEND=jax (issue 26, item 4): ``--devices 2`` uses
``keras.distribution.DataParallel`` over 2 host devices and gives the
1-device run's losses and dev metric; the best .keras it writes loads here,
on TensorFlow."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from tests.finetune_utils import tiny_model_dir
from tests.test_finetune_runner import _small_copy


def test_two_jax_devices_give_the_one_device_run(tmp_path, shared_data):
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (pip install jax): the JAX backend cannot run here")
    data_dir, texts = _small_copy(shared_data, tmp_path / "data", rows=48)
    model_dir = tiny_model_dir(str(tmp_path / "model"), texts)
    config_path = tmp_path / "model" / "bert_config.json"
    config = json.loads(config_path.read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config_path.write_text(json.dumps(config))
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    records = {}
    for devices in (1, 2):
        out = tmp_path / f"out{devices}"
        command = [sys.executable, "-m", "finetune.tnews", "--data-dir", str(data_dir), "--model-dir", model_dir,
                   "--out-dir", str(out), "--epochs", "2", "--batch-size", "8", "--maxlen", "32", "--seed", "3",
                   "--lr", "1e-3", "--dropout", "0", "--devices", str(devices)]
        result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        records[devices] = json.loads((out / "tnews_metrics.json").read_text())
    one, two = records[1], records[2]
    assert (one["replicas"], two["replicas"]) == (1, 2) and one["xla"] and two["xla"]
    assert [e["accuracy"] for e in two["epochs"]] == [e["accuracy"] for e in one["epochs"]]
    losses = [e["train_loss"] for e in one["epochs"]]
    assert losses[1] < losses[0]                                          # it trained
    assert [e["train_loss"] for e in two["epochs"]] == pytest.approx(losses, rel=1e-5)

    import keras

    import gau_keras  # noqa: F401 - registers the layers

    model = keras.saving.load_model(two["model"])                          # saved on JAX, loaded on TensorFlow
    ids = np.array([[2, 7, 8, 9, 3, 0]], "int32")
    assert model.predict([ids, np.zeros_like(ids)], verbose=0).shape == (1, 15)
