"""gau_keras.training.run_dir through pretrain.py, and its atomic writes: resume never silently starts over,
damaged checkpoints fall back with a warning, one trainer per directory,
log.jsonl without repeated updates."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from gau_keras.training import run_dir
from gau_keras.training.pretrain import pretrain
from tests.conftest import REPO_ROOT
from tests.pretrain_utils import losses, make_shards, write_config


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return make_shards(tmp_path_factory.mktemp("corpus"))


def updates_logged(tmp_path, name):
    lines = (tmp_path / name / "log.jsonl").read_text().splitlines()
    return [json.loads(line)["update"] for line in lines if '"loss"' in line]


def checkpoint_files(tmp_path, name):
    return sorted(os.listdir(tmp_path / name / "checkpoints"))


@pytest.fixture(scope="module")
def expected(tmp_path_factory, shards):
    """The losses of the 4 updates run without interruption (what every resumed run must give)."""
    root = tmp_path_factory.mktemp("straight")
    assert pretrain.main(["--config", write_config(root, shards, "straight", steps=4)]) == 0
    return losses(root, "straight")


@pytest.fixture(scope="module")
def stopped(tmp_path_factory, shards):
    """stopped(updates, tmp_path): a copy in tmp_path/run of a 4-update run stopped after
    ``updates`` (each such run made once for the module) and the path of its config."""
    runs = {}

    def copy(updates, tmp_path):
        if updates not in runs:
            root = tmp_path_factory.mktemp(f"stopped{updates}")
            path = write_config(root, shards, "run", steps=4, keep_checkpoints=5)
            assert pretrain.main(["--config", path, "--steps", str(updates)]) == 0
            runs[updates] = root
        shutil.copytree(runs[updates] / "run", tmp_path / "run")
        return write_config(tmp_path, shards, "run", steps=4, keep_checkpoints=5)

    return copy


@pytest.mark.parametrize("damage", ["garbled", "deleted"])
def test_damaged_state_file_resumes_from_the_files(tmp_path, stopped, capsys, damage, expected):
    path = stopped(2, tmp_path)
    state = tmp_path / "run" / "checkpoints" / "checkpoint"
    if damage == "garbled":
        state.write_bytes(b"\x00\xffnot a proto {{{")
    else:
        state.unlink()
    capsys.readouterr()
    assert pretrain.main(["--config", path]) == 0
    out = capsys.readouterr()
    assert "resumed from" in out.out and "ckpt-2" in out.out
    assert str(state) in out.err and ("unreadable" in out.err or "missing" in out.err)
    assert updates_logged(tmp_path, "run") == [1, 2, 3, 4]
    assert losses(tmp_path, "run") == pytest.approx(expected, rel=1e-5)
    assert {"ckpt-1.index", "ckpt-2.index", "ckpt-4.index"} <= set(checkpoint_files(tmp_path, "run"))


@pytest.mark.parametrize("part", ["index", "data"])
def test_truncated_newest_checkpoint_falls_back_to_the_previous(tmp_path, stopped, capsys, part, expected):
    path = stopped(3, tmp_path)
    name = "ckpt-3.index" if part == "index" else "ckpt-3.data-00000-of-00001"
    damaged = tmp_path / "run" / "checkpoints" / name
    damaged.write_bytes(damaged.read_bytes()[: len(damaged.read_bytes()) // 2])
    capsys.readouterr()
    assert pretrain.main(["--config", path]) == 0
    out = capsys.readouterr()
    assert "ckpt-3" in out.err and "does not restore" in out.err
    assert "resumed from" in out.out and "ckpt-2" in out.out
    assert (tmp_path / "run" / "checkpoints" / "unrestorable" / name).exists()
    assert updates_logged(tmp_path, "run") == [1, 2, 3, 4]  # update 3 logged once, though run twice
    assert losses(tmp_path, "run") == pytest.approx(expected, rel=1e-5)


def test_killed_after_last_checkpoint_log_has_no_repeats(tmp_path, shards):
    path = write_config(tmp_path, shards, "run", steps=5, save_every=2, keep_checkpoints=5)
    assert pretrain.main(["--config", path, "--steps", "3"]) == 0
    for name in os.listdir(tmp_path / "run" / "checkpoints"):  # as if killed before saving update 3
        if name.startswith("ckpt-3."):
            os.remove(tmp_path / "run" / "checkpoints" / name)
    with open(tmp_path / "run" / "log.jsonl", "a") as f:
        f.write('{"update": 3, "loss": 1.')  # a torn last line
    assert pretrain.main(["--config", path]) == 0
    assert updates_logged(tmp_path, "run") == [1, 2, 3, 4, 5]


def test_no_restorable_checkpoint_refuses_unless_restart(tmp_path, shards, capsys):
    path = write_config(tmp_path, shards, "run", steps=2)
    assert pretrain.main(["--config", path]) == 0
    for name in os.listdir(tmp_path / "run" / "checkpoints"):
        if ".index" in name:
            (tmp_path / "run" / "checkpoints" / name).write_bytes(b"broken")
    with pytest.raises(SystemExit, match="--restart"):
        pretrain.main(["--config", path])
    assert pretrain.main(["--config", path, "--restart"]) == 0
    out = capsys.readouterr().out
    moved = [p for p in os.listdir(tmp_path / "run") if p.startswith("restarted-")]
    assert len(moved) == 1 and moved[0] in out
    assert (tmp_path / "run" / moved[0] / "log.jsonl").exists()  # the earlier run is kept
    assert updates_logged(tmp_path, "run") == [1, 2]


def test_second_trainer_on_the_same_directory_is_refused(tmp_path, shards):
    path = write_config(tmp_path, shards, "run", steps=2)
    lock = run_dir.RunLock(str(tmp_path / "run")).acquire()
    try:
        code = f"from gau_keras.training.pretrain import pretrain; pretrain.main(['--config', {path!r}])"
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
        )
        assert result.returncode != 0
        assert "is in use by pid" in result.stderr and str(os.getpid()) in result.stderr
        assert not (tmp_path / "run" / "checkpoints").exists()
    finally:
        lock.release()
    assert pretrain.main(["--config", path]) == 0  # free again once the holder is gone


def test_continue_log_drops_later_and_torn_records(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps({"update": u, "loss": 1.0}) for u in (1, 2, 3)) + '\n{"upd')
    assert run_dir.continue_log(str(log), 2) == 2
    assert [json.loads(line)["update"] for line in log.read_text().splitlines()] == [1, 2]
    assert run_dir.continue_log(str(log), 2) == 0


def test_atomic_writes_keep_the_suffix_and_write_strict_json(tmp_path):
    """The one module of atomic writes (pretraining and fine-tuning): a temporary name that keeps
    the suffix Keras checks, nothing left behind, NaN written as null."""
    assert run_dir.temporary_path("a/tnews_best.weights.h5") == "a/tnews_best.partial.weights.h5"
    assert run_dir.temporary_path(tmp_path / "m.keras") == str(tmp_path / "m.partial.keras")
    path = tmp_path / "metrics.json"
    run_dir.write_json(path, {"loss": float("nan"), "epochs": [1.0, float("inf")]})
    assert json.loads(path.read_text()) == {"loss": None, "epochs": [1.0, None]}

    def killed_while_writing(temporary):
        with open(temporary, "w") as f:
            f.write("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        run_dir.save_atomically(killed_while_writing, path)
    assert json.loads(path.read_text())["loss"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_lock_that_is_a_link_or_another_file_is_refused_and_left_as_it_is(tmp_path):
    """.lock is opened without following links: a link to a user's file (or any file that is
    not a run's lock) is refused naming it, and neither it nor its target is written."""
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's notes")
    run = tmp_path / "run"
    run.mkdir()
    lock = run / ".lock"
    advice = "not a run lock file: move it away or give another train.output_dir (--output-dir)"
    make = {
        "a symbolic link": lambda: lock.symlink_to(notes),
        "a folder": lock.mkdir,
        "a file with 2 hard links": lambda: os.link(notes, lock),
        "a file holding other data": lambda: lock.write_text("the user's notes"),
    }
    for what, made in make.items():
        made()
        with pytest.raises(run_dir.RunDirError) as refused:
            run_dir.RunLock(str(run)).acquire()
        assert str(refused.value) == f"{lock} is {what}, {advice}"
        assert notes.read_text() == "the user's notes" and os.path.lexists(lock)
        lock.rmdir() if what == "a folder" else lock.unlink()


def test_the_lock_is_removed_when_the_run_ends_and_a_removal_while_waiting_is_no_race(tmp_path, monkeypatch):
    import fcntl

    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").write_text("pid 1 on old-host since 2024-01-01 00:00:00")  # a crashed run's: taken over
    lock = run_dir.RunLock(str(run)).acquire()
    assert (run / ".lock").read_text().startswith(f"pid {os.getpid()} on ")
    with pytest.raises(run_dir.RunDirError, match="is in use by pid"):
        run_dir.RunLock(str(run)).acquire()
    lock.release()
    assert os.listdir(run) == []
    # the first run ends (removing .lock) between the second's open and flock: the second locks a new file
    flock, ended = fcntl.flock, []

    def first_run_ends_now(fd, operation):
        if not ended:
            ended.append(os.fstat(fd).st_ino)
            os.unlink(run / ".lock")
        return flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", first_run_ends_now)
    lock = run_dir.RunLock(str(run)).acquire()
    assert ended and os.stat(run / ".lock").st_ino == os.fstat(lock._fd).st_ino
    lock.release()
    assert os.listdir(run) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_run_directory_is_named_with_its_option(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o555)
    try:
        with pytest.raises(run_dir.RunDirError) as refused:
            run_dir.RunLock(str(run), option="--out-dir").acquire()
        assert str(refused.value) == f"--out-dir {run} is not writable (Permission denied)"
        with pytest.raises(
            run_dir.RunDirError,
            match=f"train.output_dir \\(--output-dir\\) {run / 'sub'} is not writable \\(Permission denied\\)",
        ):
            run_dir.RunLock(str(run / "sub")).acquire()
    finally:
        run.chmod(0o755)
