"""``gau-keras finetune`` on several JAX processes (issue 50, item 1).

Two localhost processes of one CPU device each (``--coordinator``, gloo collectives) fine-tune
tnews as the head-kind runs do (tests/finetune_utils.py: a tiny random GAU-alpha, dropout 0,
2 epochs of 2 batches of 4; here 16 tokens, 4 dev and 4 test examples); meanwhile this process
runs the same on one process. Each process feeds its 2 rows of every batch, and the evaluations
and predictions are computed by both; the 2-process run gives the 1-process run's losses (1e-5),
dev metrics and predictions, and process 1 writes nothing (its ``--out-dir`` stays absent).
Also: two processes given other options (--lr) both stop before any work; each process's rows of
the padded batches, concatenated, are the batches; batches that do not split over the devices are
an error.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from tests.finetune_utils import head_kind_argv, real_vocab_model_dir

FINETUNE = [sys.executable, "-m", "gau_keras", "finetune", "tnews"]
#: sequences cut to 16 tokens and batches of 4 everywhere: one shape to compile for each program
SHAPES = ["--maxlen", "16", "--max-eval-examples", "4", "--max-test-examples", "4"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, requires_jax):
    from gau_keras.training.finetune import runner

    model_dir = real_vocab_model_dir(tmp_path_factory, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    root = tmp_path_factory.mktemp("finetune_processes")
    path = os.pathsep.join([str(REPO_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=path)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    jobs = {}
    for name, extra in [("process", [[], []]), ("mismatch", [["--lr", "1e-3"], ["--lr", "2e-3"]])]:
        address = f"127.0.0.1:{_free_port()}"
        for i, out_dir in enumerate([root / name, root / f"{name}-1"]):
            argv = FINETUNE + head_kind_argv("tnews", model_dir, out_dir) + SHAPES + ["--coordinator", address]
            argv += ["--num-processes", "2", "--process-id", str(i), "--coordinator-timeout", "60", *extra[i]]
            log = (root / f"{name}-{i}.log").open("w")
            jobs[f"{name}-{i}"] = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            log.close()
    one = runner.run("tnews", head_kind_argv("tnews", model_dir, root / "one") + SHAPES)  # meanwhile, here
    done = {}
    for name, process in jobs.items():
        try:
            process.wait(300)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        done[name] = (process.returncode, (root / f"{name}.log").read_text())
    return root, one, done


def _metrics(root, name):
    return json.loads((root / name / "tnews_metrics.json").read_text())


@pytest.mark.jax_only
def test_two_processes_give_the_one_process_run_and_only_process_0_writes(runs):
    root, one, done = runs
    assert one == 0
    for name in ("process-0", "process-1"):
        assert done[name][0] == 0, done[name][1][-3000:]
    alone, together = _metrics(root, "one"), _metrics(root, "process")
    assert (alone["processes"], together["processes"]) == (1, 2) and together["replicas"] == 2
    assert len(together["epochs"]) == len(alone["epochs"]) == 2
    for ours, theirs in zip(together["epochs"], alone["epochs"]):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=0, abs=1e-5)
        assert ours["accuracy"] == theirs["accuracy"]
    assert together["best"]["epoch"] == alone["best"]["epoch"]
    assert together["train_examples"] == alone["train_examples"] == 8 and together["dev_examples"] == 4
    predictions = [(root / name / "tnews_predict.json").read_text() for name in ("one", "process")]
    assert predictions[0] == predictions[1] and predictions[0].count("\n") >= 1
    assert (root / "process" / "tnews_best.keras").is_file()
    assert not (root / "process-1").exists()  # process 1 wrote nothing


@pytest.mark.jax_only
def test_processes_given_other_options_both_stop_before_any_work(runs):
    root, _, done = runs
    for name in ("mismatch-0", "mismatch-1"):
        status, output = done[name]
        errors = [line for line in output.splitlines() if line.startswith("error: ")]
        assert status == 2 and errors == [
            "error: process(es) [1] fine-tune another run than process 0 (the task, data, model files or options "
            "such as --lr or --epochs differ); start every process with the same flags and model"
        ], output[-3000:]
    assert not (root / "mismatch").exists() and not (root / "mismatch-1").exists()


def test_the_processes_rows_of_each_padded_batch_are_the_batch():
    from gau_keras.training.finetune.batching import PaddedBatches
    from gau_keras.training.finetune.task import Feature

    lengths = [3, 5, 2, 4, 6, 1, 2, 3]
    features = [Feature(inputs=(np.arange(1, n + 1),), label=np.array([n])) for n in lengths]
    whole = PaddedBatches(features, 4, shuffle=True, seed=5)
    parts = [PaddedBatches(features, 4, shuffle=True, seed=5, shard=(2, i)) for i in range(2)]
    for index in range(len(whole)):
        (tokens,), labels = whole[index]
        (first,), first_labels = parts[0][index]
        (second,), second_labels = parts[1][index]
        assert first.shape == (2, tokens.shape[1])  # padded as the whole batch is
        np.testing.assert_array_equal(np.concatenate([first, second]), tokens)
        np.testing.assert_array_equal(np.concatenate([first_labels, second_labels]), labels)


def test_batches_that_do_not_split_over_the_devices_are_an_error():
    from gau_keras.training.finetune.training import check_batches_split

    check_batches_split(8, 4, 2, 2)
    message = r"^--batch-size 4: on 2 processes .* 9 train features give batches of 4 and 1;"
    with pytest.raises(ValueError, match=message):
        check_batches_split(9, 4, 2, 2)


def test_process_flags_under_tensorflow_and_an_id_beyond_the_count_are_one_line_errors(tmp_path, capsys):
    from gau_keras.training.finetune import runner

    argv = ["--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "out"), "--coordinator", "127.0.0.1:1"]
    assert runner.run("tnews", argv) == 2
    assert capsys.readouterr().err == (
        "error: --coordinator / --num-processes / --process-id start several JAX processes; under "
        "KERAS_BACKEND=tensorflow fine-tuning runs on one host\n"
    )
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        runner.run("tnews", ["--data-dir", str(tmp_path), "--num-processes", "2", "--process-id", "2"])
    assert "process_id 2: must be below num_processes 2" in capsys.readouterr().err
