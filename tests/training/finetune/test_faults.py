"""Fine-tuning runs that go wrong: an output folder that cannot be written or
is in use, an interrupted run, a bad --predict-split, --epochs 0; every
artefact reaches its final name whole or not at all."""

import json
import os
import pathlib

import pytest

from gau_keras.training.finetune import runner, training
from gau_keras.training.run_dir import RunLock
from tests.finetune_utils import tiny_model_dir

TEXTS = ["今天天气很好", "股市大涨了", "球队赢了比赛", "新手机发布", "电影很好看", "学校开学了"]
LABELS = ["100", "101", "102", "103", "104", "106"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(data folder of a tiny tnews, tiny model folder)."""
    root = tmp_path_factory.mktemp("tnews")
    for split, rows in (("train", 12), ("dev", 6), ("test", 4)):
        lines = [
            json.dumps(
                {"id": i, "sentence": TEXTS[i % 6], **({} if split == "test" else {"label": LABELS[i % 6]})},
                ensure_ascii=False,
            )
            for i in range(rows)
        ]
        (root / f"{split}.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(root), tiny_model_dir(str(root / "model"), TEXTS)


def _argv(setup, out_dir, *extra):
    data_dir, model_dir = setup
    return [
        "--data-dir",
        data_dir,
        "--model-dir",
        model_dir,
        "--out-dir",
        str(out_dir),
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--maxlen",
        "16",
        *extra,
    ]


def _strict_json(path):
    def refuse(constant):
        raise ValueError(f"{path}: {constant} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def test_a_write_cut_short_leaves_no_file_under_the_final_name_and_the_rerun_replaces_it(
    setup, tmp_path, capsys, monkeypatch
):
    import keras

    out = tmp_path / "out"
    paths = runner.output_paths(out, "tnews")
    save_weights = keras.Model.save_weights

    def killed_while_writing(self, filepath, *args, **kwargs):
        with open(filepath, "wb") as f:
            f.write(b"\x89HDF\r\n" + bytes(90))  # 96 bytes, then the process is gone
        raise KeyboardInterrupt

    monkeypatch.setattr(keras.Model, "save_weights", killed_while_writing)
    with pytest.raises(KeyboardInterrupt):
        runner.run("tnews", _argv(setup, out))
    monkeypatch.setattr(keras.Model, "save_weights", save_weights)
    assert not paths["weights"].exists() and list(out.iterdir()) == []  # .lock too: removed as the run ended
    # an interrupted run's outputs (metrics without "finished") are replaced, saying so
    paths["weights"].write_bytes(b"\x89HDF\r\n" + bytes(90))
    paths["metrics"].write_text(json.dumps({"task": "tnews", "epochs": []}))
    assert runner.run("tnews", _argv(setup, out, "--epochs", "0")) == 0
    assert "replacing the outputs of an interrupted run" in capsys.readouterr().out
    record = _strict_json(paths["metrics"])  # --epochs 0 wrote NaN here
    assert record["finished"] and record["epochs"][0]["train_loss"] is None
    assert paths["weights"].stat().st_size > 1000 and paths["model"].is_file() and paths["predictions"].is_file()
    assert not [p for p in out.iterdir() if ".partial" in p.name or p.name.endswith(".tmp") or p.name == ".lock"]
    assert runner.run("tnews", _argv(setup, out)) == 2  # a finished run is kept without --overwrite
    assert "already exist; pass --overwrite (Options.overwrite=True) to replace them" in capsys.readouterr().err


def test_an_out_dir_in_use_or_not_writable_is_refused_before_any_work(setup, tmp_path, capsys, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("the run started working")

    monkeypatch.setattr(training, "load_split", no_work)
    out = tmp_path / "busy"
    lock = RunLock(str(out)).acquire()
    try:
        assert runner.run("tnews", _argv(setup, out)) == 2
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert f"run directory {out} is in use by pid {os.getpid()}" in err and "give another --out-dir" in err
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for out_dir, cause in ((a_file / "sub", "is not writable (Not a directory)"), (a_file, "is a file, not a folder")):
        assert runner.run("tnews", _argv(setup, out_dir)) == 2
        assert f"error: --out-dir {out_dir} {cause}\n" == capsys.readouterr().err
    assert runner.run("tnews", _argv(setup, tmp_path / "out", "--predict-split", "tset")) == 2
    assert "predict_split tset: tnews: no tset.json in" in capsys.readouterr().err


def _no_work(*args, **kwargs):
    raise AssertionError("the run started working")


def _record(i, **fields):
    return json.dumps({"id": i, "sentence": TEXTS[i % 6], "label": LABELS[i % 6], **fields}, ensure_ascii=False)


@pytest.mark.parametrize(
    "task, lines, message",
    [
        # tnews's records (codes 100..116, iflytek labels too) given to iflytek
        (
            "iflytek",
            [_record(i, label_desc="news_story", keywords="") for i in range(6)],
            "no record has the fields iflytek expects ('sentence', 'label'; not tnews's 'label_desc', 'keywords')",
        ),
        (
            "tnews",
            [_record(0), '{"id": 1', _record(2), "[3]", _record(4), '{"id": 5, "label": "100"}', "\x00\x01"],
            "4 of 7 records are malformed, more than half: is it a tnews file? First problems: line 2: invalid JSON",
        ),
        ("tnews", [_record(i, sentence=" ") for i in range(4)], "every one of its 4 tnews examples has an empty text"),
    ],
)
def test_a_train_file_of_another_task_mostly_malformed_or_without_text_is_refused_before_training(
    setup, tmp_path, capsys, monkeypatch, task, lines, message
):
    monkeypatch.setattr(training, "build_transformer", _no_work)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (data / "dev.json").write_text((pathlib.Path(setup[0]) / "dev.json").read_text(encoding="utf-8"), encoding="utf-8")
    assert runner.run(task, _argv(setup, tmp_path / "out", "--data-dir", str(data))) == 2
    assert f"error: {data / 'train.json'}: {message}" in capsys.readouterr().err


def test_a_symlinked_lock_is_refused_and_its_target_kept(setup, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(training, "load_split", _no_work)
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's notes")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").symlink_to(notes)
    assert runner.run("tnews", _argv(setup, out)) == 2
    assert capsys.readouterr().err == (
        f"error: {out / '.lock'} is a symbolic link, not a run lock file: move it away or give another --out-dir\n"
    )
    assert notes.read_text() == "the user's notes" and (out / ".lock").is_symlink()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_dir_is_refused_naming_the_flag(setup, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(training, "load_split", _no_work)
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert runner.run("tnews", _argv(setup, out)) == 2
    finally:
        out.chmod(0o755)
    assert capsys.readouterr().err == f"error: --out-dir {out} is not writable (Permission denied)\n"


def test_a_maxlen_beyond_a_learned_position_table_is_refused_before_any_work(setup, tmp_path, capsys, monkeypatch):
    bert = tiny_model_dir(str(tmp_path / "bert"), TEXTS, model="bert")  # max_position_embeddings=64
    monkeypatch.setattr(training, "load_split", _no_work)
    assert (
        runner.run("tnews", _argv(setup, tmp_path / "out", "--model-dir", bert, "--model", "bert", "--maxlen", "65"))
        == 2
    )
    assert capsys.readouterr().err == (
        f"error: --maxlen 65 is longer than the 64 positions model 'bert' has (max_position_embeddings=64 in "
        f"{os.path.join(bert, 'bert_config.json')}): give --maxlen 64 or less, or fine-tune a model with rotary "
        f"positions (gau_alpha, roformer_v2)\n"
    )
    for model_dir, model, maxlen in ((bert, "bert", 64), (setup[1], "gau_alpha", 600)):  # GAU-alpha: RoPE, no table
        runner.check_maxlen(
            runner.Options.for_task("tnews", data_dir=setup[0], model_dir=model_dir, model=model, maxlen=maxlen)
        )
