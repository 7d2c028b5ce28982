"""pretrain/pretrain.py on several JAX processes (issue 50, item 1).

Two localhost processes of one CPU device each (``jax.distributed`` with
gloo collectives) train the tiny GAU-alpha config of tests/pretrain_utils.py;
process 1 is killed once checkpoint 2 is written, which stops process 0 with
a one-line error; started again with 2 CPU devices each, both resume from
the last checkpoint and give the losses of one process on one device (run
here, in the test process); so does a 2-update run of a tiny SRU++ on 2
processes. Each process reads its own rows of every global batch (counted
here on the pipeline). Also: a checkpoint of two processes refused by one, an
unreachable coordinator, a process id beyond the count, processes given
other configs.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from tests.pretrain_utils import losses, make_shards, write_config

PRETRAIN = [sys.executable, "-m", "gau_keras.training.pretrain.pretrain"]
STEPS = 4


def _env(root, devices=1):
    path = os.pathsep.join([str(REPO_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=path)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"  # CPU devices per process
    # the resumed processes load the step the first ones compiled
    env.update(
        JAX_COMPILATION_CACHE_DIR=str(root / "jax_cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
    )
    return env


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(root, argv, name, devices=1):
    log = root / f"{name}.log"
    process = subprocess.Popen(
        argv, cwd=REPO_ROOT, env=_env(root, devices), stdout=log.open("w"), stderr=subprocess.STDOUT, text=True
    )
    return process, log


def _two_processes(root, config, name, devices=1):
    """The 2 processes of one run on localhost, ``devices`` CPU devices each: {f'{name}-{i}': (process, log)}."""
    port = _free_port()
    return {
        f"{name}-{i}": _start(
            root,
            PRETRAIN
            + ["--config", config, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
            + ["--process-id", str(i), "--coordinator-timeout", "60", "--heartbeat-timeout", "5"],
            f"{name}-{i}",
            devices,
        )
        for i in range(2)
    }


def _finish(jobs, timeout=240):
    """{name: (exit status, output)} of the started ``jobs`` {name: (process, log)}; a job
    still running after ``timeout`` seconds is killed (status -9)."""
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


def _kill_at_checkpoint(process, folder, stop):
    """SIGKILLs ``process`` once the checkpoint ``folder`` is written (or when ``stop`` is set)."""
    while not stop.is_set() and process.poll() is None:
        if folder.is_dir():
            process.send_signal(signal.SIGKILL)
            return
        time.sleep(0.02)


def _main(argv):
    """pretrain.main's exit status in this process, or its SystemExit message."""
    from gau_keras.training.pretrain import pretrain

    try:
        return pretrain.main(argv)
    except SystemExit as stop:
        return str(stop)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, requires_jax):
    root = tmp_path_factory.mktemp("pretrain_processes")
    shards = make_shards(root)
    one = write_config(root, shards, "one", steps=STEPS, eval_every=STEPS)
    two = write_config(root, shards, "two", steps=STEPS, eval_every=STEPS)
    start = time.time()
    killed = _two_processes(root, two, "killed")
    stop = threading.Event()
    killer = threading.Thread(
        target=_kill_at_checkpoint, args=(killed["killed-1"][0], root / "two" / "checkpoints" / "2", stop)
    )
    killer.start()
    address = f"127.0.0.1:{_free_port()}"
    mismatch = {
        f"mismatch-{i}": _start(root, [sys.executable, "-c", MISMATCH, address, str(i)], f"mismatch-{i}")
        for i in range(2)
    }
    done = {"one": _main(["--config", one, "--devices", "1"])}  # meanwhile, here: the one-process run
    done.update(_finish(killed))
    stop.set()
    killer.join()
    shutil.copytree(root / "two", root / "other_count")  # the checkpoints of two processes
    resumed = _two_processes(root, two, "resumed", devices=2)  # and resharded onto 2 devices each
    srupp = _two_processes(root, _srupp_config(root, shards, "srupp_two"), "srupp")
    done["other_count"] = _main(["--config", two, "--output-dir", str(root / "other_count"), "--devices", "1"])
    unreachable = ["--config", one, "--coordinator", f"127.0.0.1:{_free_port()}", "--num-processes", "2"]
    unreachable += ["--process-id", "1", "--coordinator-timeout", "2", "--output-dir", str(root / "nowhere")]
    done["unreachable"] = _main(unreachable)
    done["srupp_one"] = _main(["--config", _srupp_config(root, shards, "srupp_one"), "--devices", "1"])
    done.update(_finish({**resumed, **mismatch, **srupp}))
    print(f"pretraining on 2 processes and its checks took {time.time() - start:.0f} s")
    return root, done


def _srupp_config(root, shards, name):
    """A run config of a 1-layer SRU++ (test_pretrain's encoders, with dropout) for 2 updates, one checkpoint."""
    path = write_config(root, shards, name, save_every=2)
    config = json.loads(open(path).read())
    kept = ("vocab_size", "hidden_size", "hidden_dropout_prob", "attention_probs_dropout_prob")
    base = {k: config["model_config"][k] for k in kept}
    config["model"], config["model_config"] = "srupp", {**base, "num_hidden_layers": 1, "proj_size": 8}
    open(path, "w").write(json.dumps(config))
    return path


def _log(root, name):
    return [json.loads(line) for line in (root / name / "log.jsonl").read_text().splitlines()]


def _resumed_from(done):
    """The checkpoint folder the killed run's process 0 named, and its update."""
    line = next(line for line in done["killed-0"][1].splitlines() if line.startswith("error: "))
    folder = line.rsplit("resume from checkpoint ", 1)[1]
    return folder, int(os.path.basename(folder))


@pytest.mark.jax_only
def test_a_killed_process_stops_the_other_with_a_one_line_error(runs):
    root, done = runs
    assert done["killed-1"][0] == -signal.SIGKILL, done["killed-1"][1][-3000:]
    status, output = done["killed-0"]
    assert status == 2, output[-3000:]
    assert "[Gloo] Rank 1 is connected to 1 peer ranks" in done["killed-1"][1]
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: process 0 of 2: a computation with the other processes")
    assert "a process of the run stopped or cannot be reached; start every process again" in errors[0]
    folder, update = _resumed_from(done)
    assert folder.startswith(str(root / "two" / "checkpoints")) and 2 <= update < STEPS


def _finished(done, *names):
    """Each named process exited 0 (else its output's tail)."""
    for name in names:
        assert done[name][0] == 0, f"{name}: {done[name][1][-3000:]}"


@pytest.mark.jax_only
def test_the_processes_started_again_on_two_devices_each_resume_and_give_the_one_process_losses(runs):
    root, done = runs
    assert done["one"] == 0
    _finished(done, *("resumed-0", "resumed-1"))
    folder, update = _resumed_from(done)
    assert f"resumed from {folder}: update {update}" in done["resumed-0"][1]
    one, two = losses(root, "one"), losses(root, "two")
    assert len(one) == STEPS and len(two) == STEPS and all(np.isfinite(one))
    np.testing.assert_allclose(two, one, atol=1e-5, rtol=0)
    # every process took part in the held-out evaluation; process 0 alone wrote the log
    evaluation = [r for r in _log(root, "two") if "eval_loss" in r]
    alone = [r for r in _log(root, "one") if "eval_loss" in r]
    assert [r["update"] for r in evaluation] == [STEPS] and evaluation[0]["eval_masked_tokens"] > 0
    assert evaluation[0]["eval_loss"] == pytest.approx(alone[0]["eval_loss"], abs=1e-5)
    # one step folder per checkpoint, each process's data iterator in it
    iterators = sorted(os.listdir(root / "two" / "checkpoints" / str(STEPS) / "data_iterator"))
    assert {"iterator-0-of-2.index", "iterator-1-of-2.index"} <= set(iterators)
    assert (root / "two" / "export" / "bert_model.ckpt.index").exists()


@pytest.mark.jax_only
def test_srupp_on_two_processes_gives_the_one_process_losses(runs):
    root, done = runs
    assert done["srupp_one"] == 0
    _finished(done, *("srupp-0", "srupp-1"))
    one, two = losses(root, "srupp_one"), losses(root, "srupp_two")
    assert len(one) == len(two) == 2 and all(np.isfinite(one))
    np.testing.assert_allclose(two, one, atol=1e-5, rtol=0)


@pytest.mark.jax_only
def test_a_checkpoint_of_two_processes_is_refused_by_one(runs):
    root, done = runs
    _, update = _resumed_from(done)
    folder = root / "other_count" / "checkpoints" / str(update)
    assert done["other_count"] == (
        f"error: checkpoint {folder} was written by 2 process(es) and this run has 1: each process's data iterator "
        f"holds its own rows of the batches; resume it with 2 process(es), or pass --restart to start from update 0"
    )
    assert "unrestorable" not in os.listdir(root / "other_count" / "checkpoints")  # nothing moved aside


@pytest.mark.jax_only
def test_an_unreachable_coordinator_is_a_time_limited_error_naming_it(runs):
    _, done = runs
    assert done["unreachable"].startswith("error: --coordinator 127.0.0.1:")
    assert "process 1 of 2 could not reach it within 2 s" in done["unreachable"]
    assert "\n" not in done["unreachable"]


@pytest.mark.jax_only
def test_processes_started_with_other_configs_stop_before_training(runs):
    _, done = runs
    for i in range(2):
        status, output = done[f"mismatch-{i}"]
        assert status == 0, output[-2000:]
        assert (
            f"error: c{i}.json: process(es) [1] train another config than process 0 (data, model, optimizer or "
            f"train settings differ); start every process with the same config and flags"
        ) in output, output[-2000:]


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
    from gau_keras.training import processes
    from gau_keras.training.pretrain import pretrain

    with pytest.raises(SystemExit):
        pretrain.parse_args(["--config", "c.json", "--num-processes", "2", "--process-id", "2"])
    assert "--process-id 2: must be below --num-processes 2" in capsys.readouterr().err
    assert pretrain.parse_args(["--config", "c.json", "--tpu"]).tpu == "local"  # the TPU VM's own (both backends)
    for name in processes.PROCESS_ENV.values():
        monkeypatch.delenv(name, raising=False)
    assert processes._process_settings(None, None, None) is None
    with pytest.raises(DeviceError, match=r"^a run of several processes needs --coordinator \(or JAX_COORDINATOR"):
        processes._process_settings(None, 2, 0)
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "4")
    monkeypatch.setenv("JAX_PROCESS_ID", "4")
    with pytest.raises(DeviceError, match=r"^--process-id 4: must be in 0\.\.3 \(--num-processes 4\)$"):
        processes._process_settings(None, None, None)
    assert processes._process_settings(None, None, 3) == ("10.0.0.1:1234", 4, 3)


@pytest.mark.jax_only
def test_tpu_on_jax_joins_the_slice_through_jax_distributed_without_arguments(tmp_path, monkeypatch):
    import jax

    from gau_keras.training import processes

    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setattr(processes, "_joined", None)  # the run this process joined: none yet, none after
    for name in processes.PROCESS_ENV.values():
        monkeypatch.delenv(name, raising=False)
    config = write_config(tmp_path, make_shards(tmp_path), "tpu")
    # the TPU path: initialize() with no coordinator, count or id, then the devices must be TPU cores
    assert _main(["--config", config, "--tpu"]) == (
        "error: --tpu: JAX's devices here are CPUs, not TPU cores; run on the hosts of a TPU VM slice, or drop --tpu"
    )
    assert len(calls) == 1 and calls[0][0] == ()
    assert not {"coordinator_address", "num_processes", "process_id"} & set(calls[0][1])
    named = ["--coordinator", "10.0.0.1:1234", "--num-processes", "2", "--process-id", "0"]
    assert _main(["--config", config, "--tpu", *named]) == (
        "error: --tpu with --coordinator, --num-processes, --process-id: on a TPU slice jax.distributed.initialize() "
        "takes the coordinator, process count and id from the TPU VM; drop --coordinator, --num-processes, "
        "--process-id, or drop --tpu to name the processes"
    )
    monkeypatch.setenv("JAX_PROCESS_ID", "1")
    assert _main(["--config", config, "--tpu"]).startswith("error: --tpu with JAX_PROCESS_ID: on a TPU slice")
    assert _main(["--config", config, "--tpu", "my-tpu"]).startswith(
        "error: --tpu my-tpu: naming a TPU is TensorFlow's TPUStrategy; under KERAS_BACKEND=jax run the command "
        "on every host of the TPU slice with --tpu alone"
    )
    assert len(calls) == 1  # none of the refused runs joined anything


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
