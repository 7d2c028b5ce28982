"""pretrain.py under MultiWorkerMirroredStrategy with two worker processes on
this machine (TF_CONFIG on loopback ports), against one worker.

Every worker runs the same pipeline of global batches and each replica takes
its rows, so the two runs compute the same updates; the losses agree to the
float32 summation order of the all-reduce (rtol 1e-5). Dropout is 0: each
worker draws the dropout masks of its own rows, so with dropout the runs
would agree in distribution, not in value.
"""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.pretrain_utils import losses, make_shards, write_config


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return make_shards(tmp_path_factory.mktemp("corpus"))


def _config(tmp_path, shards, name, steps=6):
    path = write_config(tmp_path, shards, name, steps=steps, save_every=3, log_every=1)
    config = json.loads(open(path).read())
    config["model_config"].update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    open(path, "w").write(json.dumps(config))
    return path


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _one_worker(config, monkeypatch):
    """The one-worker run, here in the test process (a TensorFlow start less than a subprocess)."""
    from gau_keras.training.pretrain import pretrain

    monkeypatch.delenv("TF_CONFIG", raising=False)
    return pretrain.main(["--config", config])


def _pretrain(config, *extra, workers, log_dir):
    """Runs ``python -m gau_keras.training.pretrain.pretrain`` in ``workers`` processes; returns their exit codes."""
    command = [sys.executable, "-m", "gau_keras.training.pretrain.pretrain", "--config", config, *extra]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(workers)]}
    processes = []
    for index in range(workers):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        log = open(os.path.join(log_dir, f"worker{index}.log"), "w")
        processes.append(subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT))
    return [p.wait(timeout=600) for p in processes]


def _tail(tmp_path, index):
    return (tmp_path / f"worker{index}.log").read_text()[-3000:]


def test_two_workers_stopped_and_resumed_equal_one_worker(tmp_path, shards, monkeypatch):
    """Two workers run 3 of the 6 updates, stop, and two workers resume: the six losses are the
    one-worker run's (a difference in the two-worker updates shows in updates 1-3, an inexact
    resume in 4-6)."""
    assert _one_worker(_config(tmp_path, shards, "one"), monkeypatch) == 0
    expected = losses(tmp_path, "one")
    two = _config(tmp_path, shards, "two")
    codes = _pretrain(two, "--steps", "3", workers=2, log_dir=str(tmp_path))
    assert codes == [0, 0], _tail(tmp_path, 0) + _tail(tmp_path, 1)
    assert _pretrain(two, workers=2, log_dir=str(tmp_path)) == [0, 0], _tail(tmp_path, 0) + _tail(tmp_path, 1)
    assert "resumed from" in _tail(tmp_path, 0) and "ckpt-3" in _tail(tmp_path, 1)
    log = [json.loads(line)["update"] for line in (tmp_path / "two" / "log.jsonl").read_text().splitlines()]
    assert log == [1, 2, 3, 4, 5, 6]  # the chief logs, once per update
    assert losses(tmp_path, "two") == pytest.approx(expected, rel=1e-5)
    assert (tmp_path / "two" / "export" / "bert_model.ckpt.index").exists()
    assert sorted(os.listdir(tmp_path / "two" / "checkpoints"))[:2] == ["checkpoint", "ckpt-3.data-00000-of-00001"]
