"""pretrain/pretrain.py on several JAX processes (issue 50, item 1).

Two localhost processes of one CPU device each (``jax.distributed`` with
gloo collectives) train the tiny GAU-alpha config of tests/pretrain_utils.py,
stopped after update 2 and resumed, and give the losses of one process on
one device; each process reads its own rows of every global batch (counted
here on the pipeline). Also: a checkpoint of two processes resumed by one,
an unreachable coordinator, a process id beyond the count.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from tests.pretrain_utils import losses, make_shards, write_config

PRETRAIN = [sys.executable, "-m", "gau_keras.training.pretrain.pretrain"]


def _env():
    path = os.pathsep.join([str(REPO_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=path)
    env.pop("XLA_FLAGS", None)  # one CPU device per process
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv, log):
    return subprocess.Popen(
        PRETRAIN + argv, cwd=REPO_ROOT, env=_env(), stdout=log.open("w"), stderr=subprocess.STDOUT, text=True
    )


def _processes(config, count, *extra, port=None):
    """The argv of each of ``count`` processes of one run on localhost."""
    port = port or _free_port()
    return [
        ["--config", config, *extra, "--coordinator", f"127.0.0.1:{port}", "--num-processes", str(count)]
        + ["--process-id", str(i)]
        for i in range(count)
    ]


def _finish(jobs, timeout=600):
    """{name: (exit status, output)} of the started ``jobs`` {name: (process, log)}."""
    deadline = time.time() + timeout
    done = {}
    for name, (process, log) in jobs.items():
        try:
            process.wait(max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        done[name] = (process.returncode, log.read_text())
    return done


@pytest.fixture(scope="module")
def runs(tmp_path_factory, requires_jax):
    root = tmp_path_factory.mktemp("pretrain_processes")
    shards = make_shards(root)
    one = write_config(root, shards, "one", steps=3, eval_every=3)
    two = write_config(root, shards, "two", steps=3, eval_every=3)
    start = time.time()
    jobs = {"one": (_start(["--config", one], root / "one.log"), root / "one.log")}
    for i, argv in enumerate(_processes(two, 2, "--steps", "2")):
        jobs[f"two-{i}"] = (_start(argv, root / f"two-{i}.log"), root / f"two-{i}.log")
    unreachable = ["--config", one, "--coordinator", f"127.0.0.1:{_free_port()}", "--num-processes", "2"]
    unreachable += ["--process-id", "1", "--coordinator-timeout", "5", "--output-dir", str(root / "nowhere")]
    jobs["unreachable"] = (_start(unreachable, root / "unreachable.log"), root / "unreachable.log")
    done = _finish(jobs)
    shutil.copytree(root / "two", root / "other_count")  # checkpoints 1 and 2 of two processes
    jobs = {
        f"resumed-{i}": (_start(argv, root / f"resumed-{i}.log"), root / f"resumed-{i}.log")
        for i, argv in enumerate(_processes(two, 2))
    }
    jobs["other_count"] = (
        _start(["--config", two, "--output-dir", str(root / "other_count")], root / "other_count.log"),
        root / "other_count.log",
    )
    done.update(_finish(jobs))
    print(f"pretraining on 2 processes and its checks took {time.time() - start:.0f} s")
    return root, done


def _log(root, name):
    return [json.loads(line) for line in (root / name / "log.jsonl").read_text().splitlines()]


@pytest.mark.jax_only
def test_two_processes_resumed_give_the_one_process_losses(runs):
    root, done = runs
    for name in ("one", "two-0", "two-1", "resumed-0", "resumed-1"):
        assert done[name][0] == 0, f"{name}: {done[name][1][-3000:]}"
    assert "[Gloo] Rank 1 is connected to 1 peer ranks" in done["two-1"][1]
    assert f"resumed from {root / 'two' / 'checkpoints' / '2'}: update 2" in done["resumed-0"][1]
    one, two = losses(root, "one"), losses(root, "two")
    assert len(one) == 3 and len(two) == 3 and all(np.isfinite(one))
    np.testing.assert_allclose(two, one, atol=1e-5, rtol=0)
    # every process took part in the held-out evaluation; process 0 alone wrote the log
    evaluations = {r["update"]: r for r in _log(root, "two") if "eval_loss" in r}  # at update 2 (--steps 2) and 3
    assert sorted(evaluations) == [2, 3] and evaluations[3]["eval_masked_tokens"] > 0
    alone = next(r for r in _log(root, "one") if "eval_loss" in r)
    assert evaluations[3]["eval_loss"] == pytest.approx(alone["eval_loss"], abs=1e-5)
    # one step folder per checkpoint, each process's data iterator in it
    iterators = sorted(os.listdir(root / "two" / "checkpoints" / "3" / "data_iterator"))
    assert {"iterator-0-of-2.index", "iterator-1-of-2.index"} <= set(iterators)
    assert (root / "two" / "export" / "bert_model.ckpt.index").exists()


@pytest.mark.jax_only
def test_a_checkpoint_of_two_processes_is_refused_by_one(runs):
    root, done = runs
    status, output = done["other_count"]
    folder = root / "other_count" / "checkpoints" / "2"
    assert status == 2
    assert (
        f"error: checkpoint {folder} was written by 2 process(es) and this run has 1: each process's data iterator "
        f"holds its own rows of the batches; resume it with 2 process(es), or pass --restart to start from update 0"
    ) in output
    assert sorted(os.listdir(root / "other_count" / "checkpoints")) == ["1", "2"]  # nothing moved aside


@pytest.mark.jax_only
def test_an_unreachable_coordinator_is_a_time_limited_error_naming_it(runs):
    _, done = runs
    status, output = done["unreachable"]
    assert status == 2
    line = next(line for line in output.splitlines() if line.startswith("error: "))
    assert line.startswith("error: --coordinator 127.0.0.1:")
    assert "process 1 of 2 could not reach it within 5 s" in line


def test_the_processes_rows_are_the_global_batch_each_record_once(tmp_path):
    from gau_keras.tokenizers import Tokenizer, load_vocab
    from gau_keras.training.pretrain import config as config_lib
    from gau_keras.training.pretrain.trainer import training_dataset

    shards = make_shards(tmp_path)
    config = config_lib.load(write_config(tmp_path, shards, "rows"))
    tokenizer = Tokenizer(load_vocab(config["vocab"]), do_lower_case=True)

    def batches(repeat, shard, count=None):
        dataset = training_dataset(config, tokenizer, config["data"]["train"], repeat, mask, shard=shard)
        dataset = dataset.take(count) if count else dataset
        return [(inputs["Input-Token"].numpy(), labels.numpy()) for inputs, labels in dataset]

    mask = config["data"]["dynamic_mask"]
    # shuffled: the two processes' rows, concatenated, are the global batch
    whole = batches(True, (1, 0), 14)
    parts = [batches(True, (2, i), 14) for i in range(2)]
    for k, (tokens, labels) in enumerate(whole):
        assert parts[0][k][0].shape == (2, 24)
        np.testing.assert_array_equal(np.concatenate([parts[0][k][0], parts[1][k][0]]), tokens)
        np.testing.assert_array_equal(np.concatenate([parts[0][k][1], parts[1][k][1]]), labels)
    # one pass over the 48 examples: 24 rows each, none twice, none skipped
    rows = lambda items: sorted(tuple(row) for tokens, _ in items for row in tokens)  # noqa: E731
    read = [batches(False, (2, i)) for i in range(2)]
    assert [sum(len(t) for t, _ in r) for r in read] == [24, 24]
    assert rows(read[0] + read[1]) == rows(batches(False, (1, 0))) and len(rows(batches(False, (1, 0)))) == 48


def test_a_process_id_beyond_the_count_and_missing_settings_are_errors(monkeypatch, capsys):
    from gau_keras.errors import DeviceError
    from gau_keras.training.pretrain import jax_backend, pretrain

    with pytest.raises(SystemExit):
        pretrain.parse_args(["--config", "c.json", "--num-processes", "2", "--process-id", "2"])
    assert "--process-id 2: must be below --num-processes 2" in capsys.readouterr().err
    for name in jax_backend.PROCESS_ENV.values():
        monkeypatch.delenv(name, raising=False)
    assert jax_backend._process_settings(None, None, None) is None
    with pytest.raises(DeviceError, match=r"^a run of several processes needs --coordinator \(or JAX_COORDINATOR"):
        jax_backend._process_settings(None, 2, 0)
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "4")
    monkeypatch.setenv("JAX_PROCESS_ID", "4")
    with pytest.raises(DeviceError, match=r"^--process-id 4: must be in 0\.\.3 \(--num-processes 4\)$"):
        jax_backend._process_settings(None, None, None)
    assert jax_backend._process_settings(None, None, 3) == ("10.0.0.1:1234", 4, 3)


#: one process of a run whose configs differ: start_processes, then check_same_config
MISMATCH = """import sys
from gau_keras.errors import ConfigError
from gau_keras.training.pretrain import jax_backend
jax_backend.start_processes(sys.argv[1], 2, int(sys.argv[2]), timeout=120)
try:
    jax_backend.check_same_config({"config_path": f"c{sys.argv[2]}.json", "data": {"batch_size": 4 + int(sys.argv[2])}})
except ConfigError as e:
    print(f"error: {e}")
"""


@pytest.mark.jax_only
def test_processes_started_with_other_configs_stop_before_training(requires_jax):
    address = f"127.0.0.1:{_free_port()}"
    jobs = [
        subprocess.Popen(
            [sys.executable, "-c", MISMATCH, address, str(i)],
            cwd=REPO_ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [job.communicate(timeout=300)[0] for job in jobs]
    for i, output in enumerate(outputs):
        assert (
            f"error: c{i}.json: process(es) [1] train another config than process 0 (data, model, optimizer or "
            f"train settings differ); start every process with the same config and flags"
        ) in output, output[-2000:]
