"""gau_keras.training.finetune.compare: two variants of a tiny tnews run, the summary table, resuming, failures."""

import contextlib
import json

import pytest

from gau_keras.training.finetune import compare
from tests.conftest import REPO_ROOT
from tests.finetune_utils import tiny_model_dir
from tests.training.finetune.test_runner import _small_copy

TINY = "--epochs 1 --batch-size 8 --maxlen 32 --max-train-examples 8 --max-eval-examples 8"


def test_two_variants_are_tabulated_and_a_rerun_resumes(tmp_path, shared_data, capsys, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the runs are `python -m gau_keras finetune <task>`
    data_dir, texts = _small_copy(shared_data, tmp_path / "data")
    model_dir = tiny_model_dir(str(tmp_path / "model"), texts)
    out = tmp_path / "out"
    argv = [
        "--data-dir",
        str(data_dir),
        "--out-dir",
        str(out),
        "--tasks",
        "tnews",
        "--extra",
        TINY,
        "--variant",
        f"pretrained=--model-dir {model_dir}",
        "--variant",
        f"scratch=--model-dir {model_dir} --from-scratch",
    ]
    assert compare.main(argv) == 0
    printed = capsys.readouterr().out
    assert "| task | metric | pretrained | scratch |" in printed
    row = next(line for line in printed.splitlines() if line.startswith("| tnews |"))
    assert row.count("(ep 1,") == 2
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["results"]) == {"pretrained/tnews", "scratch/tnews"}
    scratch = json.loads((out / "scratch" / "tnews_metrics.json").read_text())
    assert scratch["finished"] and scratch["args"]["from_scratch"] and scratch["args"]["max_train_examples"] == 8
    assert (out / "pretrained" / "tnews.log").read_text().count("epoch 1: dev accuracy=") == 1

    assert compare.main(argv) == 0  # everything finished: nothing runs again
    assert capsys.readouterr().out.count("finished earlier") == 2


def test_a_failing_run_is_reported_and_bad_arguments_are_named(tmp_path, shared_data, capsys, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    data_dir, _ = _small_copy(shared_data, tmp_path / "data")
    argv = ["--data-dir", str(data_dir), "--out-dir", str(tmp_path / "out"), "--tasks", "tnews", "--extra", TINY]
    assert compare.main(argv + ["--variant", f"broken=--model-dir {tmp_path / 'nowhere'}"]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.err and "| tnews | - | failed |" in captured.out
    assert "nowhere" in (tmp_path / "out" / "broken" / "tnews.log").read_text()
    assert compare.main(["--data-dir", "x", "--out-dir", "y", "--variant", "a=", "--tasks", "tnews,mnli"]) == 2
    assert "mnli" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main(["--data-dir", "x", "--out-dir", "y", "--variant", "no-equals-sign"])


def _in_this_process(command, stdout, stderr):
    """compare's ``subprocess.call`` of ``python -m gau_keras finetune ...``, run in this process
    (the test above runs real processes; this saves their start-up, ~10 s each)."""
    from gau_keras.__main__ import main

    assert command[1:3] == ["-m", "gau_keras"], command
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stdout):
        return main(command[3:])


def test_a_rate_grid_keeps_the_best_rate_per_variant(tmp_path, shared_data, capsys, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(compare.subprocess, "call", _in_this_process)
    data_dir, texts = _small_copy(shared_data, tmp_path / "data")
    model_dir = tiny_model_dir(str(tmp_path / "model"), texts)
    out = tmp_path / "out"
    argv = [
        "--data-dir",
        str(data_dir),
        "--out-dir",
        str(out),
        "--tasks",
        "tnews",
        "--extra",
        TINY,
        "--lrs",
        "1e-4,3e-3",
        "--variant",
        f"pretrained=--model-dir {model_dir}",
    ]
    assert compare.main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    grid = summary["grid"]["pretrained/tnews"]
    assert set(grid) == {"0.0001", "0.003"}
    best = summary["results"]["pretrained/tnews"]
    assert best["best"]["accuracy"] == max(grid.values())
    assert grid[f"{best['lr']:g}"] == best["best"]["accuracy"]
    for rate in ("1e-4", "3e-3"):
        metrics = json.loads((out / "pretrained" / f"lr{float(rate):g}" / "tnews_metrics.json").read_text())
        assert metrics["args"]["lr"] == float(rate)


def test_unit_score_puts_every_task_on_a_0_1_scale():
    from gau_keras.training.finetune.compare import unit_score

    cmrc = {"task": "cmrc2018", "metric": "f1", "best": {"f1": 11.27, "em": 1.0}}
    cluener = {"task": "cluener", "metric": "f1", "best": {"f1": 0.5176}}
    tnews = {"task": "tnews", "metric": "accuracy", "best": {"accuracy": 0.39}}
    assert [unit_score(r) for r in (cmrc, cluener, tnews)] == pytest.approx([0.1127, 0.5176, 0.39])


def test_a_finished_run_is_reused_only_with_the_same_options(tmp_path, capsys, monkeypatch):
    """A budget, rate or variant change reruns the (task, variant, lr) instead of reusing its old metrics."""
    import argparse

    args = argparse.Namespace(out_dir=str(tmp_path), lrs=[1e-3], data_dir="data", seed=0, extra="")
    budget = compare.budget_arguments("cluener")
    earlier = {
        "finished": True,
        "metric": "f1",
        "best": {"epoch": 2, "f1": 0.5},
        "seconds": 1.0,
        "args": {
            "data_dir": "data",
            "task_name": "cluener",
            "lr": 1e-3,
            "seed": 0,
            "max_test_examples": 100,
            "epochs": 2,
            "maxlen": 64,
            "batch_size": 32,
            "max_train_examples": 3000,
            "model": "roformer_v2",
            "model_dir": "m",
            "out_dir": "elsewhere",
            "overwrite": True,
        },
    }
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "cluener_metrics.json").write_text(json.dumps(earlier))
    calls = []

    def fake_run(command, stdout, stderr):
        calls.append(command)
        (tmp_path / "v" / "cluener_metrics.json").write_text(json.dumps(dict(earlier, args={})))
        return 0

    monkeypatch.setattr(compare.subprocess, "call", fake_run)
    same = ["--model", "roformer_v2", "--model-dir", "m"]
    # the record's budget is the old one (2 epochs): the run goes again with the budget's epochs
    assert "--epochs 2" not in budget
    assert compare.run_one("cluener", "v", same, args, 1e-3, budget) is not None
    assert len(calls) == 1 and "--epochs: 2 -> " in capsys.readouterr().out

    (tmp_path / "v" / "cluener_metrics.json").write_text(json.dumps(earlier))
    old_budget = "--epochs 2 --maxlen 64 --batch-size 32 --max-train-examples 3000"
    assert compare.run_one("cluener", "v", same, args, 1e-3, old_budget) == earlier  # same options: reused
    assert len(calls) == 1 and "finished earlier" in capsys.readouterr().out
    compare.run_one("cluener", "v", ["--model", "roformer_v2", "--model-dir", "other"], args, 1e-3, old_budget)
    assert len(calls) == 2 and "--model-dir: 'm' -> 'other'" in capsys.readouterr().out
