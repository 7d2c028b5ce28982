"""pretrain/pretrain.py on a tiny config: a short run, kill-and-resume
reproducing the next losses, export loading back, config errors."""

import json
import os

import numpy as np
import pytest

from gau_keras.errors import ConfigError, RunDirError
from gau_keras.training.pretrain import bundle_model, pretrain
from gau_keras.training.pretrain import config as config_lib
from tests.pretrain_utils import TEXTS, losses, make_shards, write_config


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return make_shards(tmp_path_factory.mktemp("corpus"))


@pytest.mark.both_backends  # the pretraining run of the JAX pass (tests/conftest.py)
def test_two_steps_then_export_loads(tmp_path, shards):
    path = write_config(tmp_path, shards)
    assert pretrain.main(["--config", path]) == 0
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log] == [1, 2]
    assert all(np.isfinite(r["loss"]) and 0 <= r["masked_accuracy"] <= 1 for r in log)
    from gau_keras.pretrained import load_pretrained

    model, tokenizer = load_pretrained(str(tmp_path / "run" / "export"), with_mlm=True)
    token_ids, segment_ids = tokenizer.encode(TEXTS[0])
    probs = model.predict([np.array([token_ids]), np.array([segment_ids])], verbose=0)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert pretrain.main(["--config", path, "--evaluate-only"]) == 0
    last = json.loads((tmp_path / "run" / "log.jsonl").read_text().splitlines()[-1])
    assert last["update"] == 2 and last["eval_masked_tokens"] > 0
    bundled = tmp_path / "bundled"
    assert bundle_model.main(["--run-dir", str(tmp_path / "run"), "--config", path, "--output", str(bundled)]) == 0
    notes = (bundled / "TRAINING.md").read_text()
    assert "updates: 2 of batch 4" in notes and "held-out masked-token accuracy" in notes
    assert load_pretrained(str(bundled))[0].output.shape[-1] == 16
    with pytest.raises(SystemExit):  # no silent overwrite
        bundle_model.main(["--run-dir", str(tmp_path / "run"), "--config", path, "--output", str(bundled)])


def test_resume_continues_step_count_and_reproduces_losses(tmp_path, shards):
    straight = write_config(tmp_path, shards, "straight", steps=4)
    assert pretrain.main(["--config", straight]) == 0
    interrupted = write_config(tmp_path, shards, "interrupted", steps=4)
    assert pretrain.main(["--config", interrupted, "--steps", "2"]) == 0  # "killed" after update 2
    assert pretrain.main(["--config", interrupted]) == 0  # resumes at update 2
    log = [json.loads(line) for line in (tmp_path / "interrupted" / "log.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log] == [1, 2, 3, 4]
    np.testing.assert_allclose(losses(tmp_path, "interrupted"), losses(tmp_path, "straight"), rtol=1e-5)


def _with(path, **sections):
    """Rewrites the config at ``path`` with top-level keys / sections updated."""
    config = json.loads(open(path).read())
    for key, value in sections.items():
        config[key] = {**config[key], **value} if isinstance(config.get(key), dict) else value
    open(path, "w").write(json.dumps(config))
    return path


def _logged(tmp_path, name, key):
    lines = (tmp_path / name / "log.jsonl").read_text().splitlines()
    return [json.loads(line)[key] for line in lines if "loss" in json.loads(line)]


def test_stages_train_like_a_run_resumed_with_its_config_changed(tmp_path, shards):
    """The staged config, stopped by --steps inside its first stage and resumed (which crosses
    the stage boundary in one process), trains like the first stage's settings run by hand for
    2 updates, then the staged config resumed at the boundary."""
    first = {"learning_rate": 1e-2, "schedule": {"0": 1}}
    staged = _with(write_config(tmp_path, shards, "staged", steps=4), stages=[{"until": 2, "optimizer": first}])
    # --steps inside a stage ends the run there, with that stage's settings; resumed, it goes on
    assert pretrain.main(["--config", staged, "--steps", "1"]) == 0
    assert _logged(tmp_path, "staged", "learning_rate") == pytest.approx([1e-2])
    assert pretrain.main(["--config", staged]) == 0
    assert _logged(tmp_path, "staged", "update") == [1, 2, 3, 4]
    lrs = _logged(tmp_path, "staged", "learning_rate")
    np.testing.assert_allclose(lrs, [1e-2, 1e-2, 5e-3 * (1 - 0.9 * 3 / 10), 5e-3 * (1 - 0.9 * 4 / 10)], rtol=1e-5)
    assert not (tmp_path / "staged" / "restarted").exists() and (tmp_path / "staged" / "export").exists()
    # by hand: the first stage's settings for 2 updates, then the staged config resumes from there
    by_hand = _with(write_config(tmp_path, shards, "by_hand", steps=2), optimizer=first)
    assert pretrain.main(["--config", by_hand]) == 0
    assert pretrain.main(["--config", staged, "--output-dir", str(tmp_path / "by_hand")]) == 0
    assert _logged(tmp_path, "by_hand", "update") == [1, 2, 3, 4]
    np.testing.assert_allclose(losses(tmp_path, "by_hand"), losses(tmp_path, "staged"), rtol=1e-5)
    np.testing.assert_allclose(_logged(tmp_path, "by_hand", "learning_rate"), lrs, rtol=1e-6)


def _sigterm_at(monkeypatch, at):
    """Makes the trainer receive SIGTERM as it logs update ``at``."""
    import signal

    from gau_keras.training.pretrain.trainer import Trainer

    log = Trainer._log

    def log_then_terminate(self, update, *args):
        record = log(self, update, *args)
        if update == at:
            signal.raise_signal(signal.SIGTERM)
        return record

    monkeypatch.setattr(Trainer, "_log", log_then_terminate)


def test_a_signal_at_a_stage_end_stops_the_run(tmp_path, shards, monkeypatch):
    staged = _with(write_config(tmp_path, shards, steps=4), stages=[{"until": 2, "optimizer": {"learning_rate": 1e-2}}])
    _sigterm_at(monkeypatch, 2)
    assert pretrain.main(["--config", staged]) == 0
    assert _logged(tmp_path, "run", "update") == [1, 2]
    assert not (tmp_path / "run" / "export").exists()  # only the last stage's end exports


@pytest.mark.parametrize(
    "stages, message",
    [
        ([{"until": 4}], r"stages\[0\]\.until must be an integer at least 1 and below train.steps=4, got 4"),
        ([{"until": 2}, {"until": 2}], r"stages\[1\]\.until must be an integer above 2"),
        ([{"data": {}}], r"stages\[0\]\.until must be an integer at least 1 .*, got null"),
        ([{"until": 1, "data": {"maxlen": 12}}], r"stages\[0\]: data.maxlen cannot change between stages"),
        ([{"until": 1, "model_config": {}}], r"stages\[0\]: 'model_config' cannot be set by a stage"),
        (
            [{"until": 1, "optimizer": {"learning_rate": -1}}],
            r"stages\[0\]: optimizer.learning_rate must be a number >= 0, got -1",
        ),
        ({"until": 1}, "stages must be a list"),
        ([{"until": 1, "data": None}], r"stages\[0\]: 'data' must be an object, got null"),
        ([{"until": 1, "optimizer": {"schedule": {"abc": 1}}}], r"stages\[0\]: optimizer.schedule must be an object"),
        (
            [{"until": 1, "data": {"char_mask_fraction": 0.5}}],  # found before any update is trained
            r"stages\[0\]: .*char_mask_fraction=0.5.*shards of dynamic masks",
        ),
    ],
)
def test_stage_errors_name_the_stage(tmp_path, shards, stages, message):
    path = _with(write_config(tmp_path, shards, steps=4), stages=stages)
    with pytest.raises(SystemExit, match=message) as error:
        pretrain.main(["--config", path])
    assert path in str(error.value)
    assert not (tmp_path / "run").exists()


def test_evaluate_reports_majority_baseline(tmp_path, shards):
    from gau_keras.training.pretrain.trainer import Trainer

    trainer = Trainer(config_lib.load(write_config(tmp_path, shards)), xla=False)
    result = trainer.evaluate(batches=3)
    assert 0 < result["majority_baseline_accuracy"] < 1
    assert result["eval_masked_tokens"] > 0 and np.isfinite(result["eval_loss"])


def test_config_errors_name_the_key(tmp_path, shards):
    path = write_config(tmp_path, shards)
    config = json.loads(open(path).read())
    config["train"]["stpes"] = 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="stpes"):
        config_lib.load(str(bad))
    config["train"].pop("stpes")
    config["model_config"]["vocab_size"] = 7
    bad.write_text(json.dumps(config))
    with pytest.raises(SystemExit, match="vocab_size=7"):
        pretrain.main(["--config", str(bad)])


def test_sigterm_saves_the_current_update(tmp_path, shards, monkeypatch):
    import signal

    from gau_keras.training.pretrain.trainer import Trainer

    trainer = Trainer(config_lib.load(write_config(tmp_path, shards, "term", steps=50, save_every=100)), xla=False)
    _sigterm_at(monkeypatch, 3)
    trainer.train()
    assert trainer.updates() == 3
    assert trainer.state.latest_checkpoint().endswith("ckpt-3")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize(
    "model, model_config",
    [
        ("roformer_v2", {"num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "relu"}),
        ("srupp", {"proj_size": 8}),
        ("bert", {"num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu"}),
        ("roformer", {"num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu"}),
    ],
)
def test_other_encoders_pretrain(tmp_path, shards, model, model_config):
    path = write_config(tmp_path, shards, model)
    config = json.loads(open(path).read())
    base = {k: config["model_config"][k] for k in ("vocab_size", "hidden_size", "num_hidden_layers")}
    config["model"], config["model_config"] = model, {**base, **model_config}
    open(path, "w").write(json.dumps(config))
    assert pretrain.main(["--config", path]) == 0
    log = [json.loads(line) for line in (tmp_path / model / "log.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log] == [1, 2] and all(np.isfinite(r["loss"]) for r in log)
    assert (tmp_path / model / "export" / "bert_model.ckpt.index").exists()


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("data", "batch_size", 0, "data.batch_size must be an integer >= 1, got 0"),
        ("train", "steps", "80", 'train.steps must be an integer >= 1, got "80"'),
        ("optimizer", "learning_rate", -1, "optimizer.learning_rate must be a number >= 0, got -1"),
        ("optimizer", "beta_2", 1.0, "optimizer.beta_2 must be < 1"),
        ("data", "char_mask_fraction", 1.5, "data.char_mask_fraction must be <= 1, got 1.5"),
        ("train", "xla", "yes", 'train.xla must be true or false or null, got "yes"'),
        ("data", "pair_segments", 1, "data.pair_segments must be true or false, got 1"),
        ("model_config", "hidden_size", -1, "hidden_size must be an integer >= 1, got -1"),
    ],
)
def test_config_values_are_validated(tmp_path, shards, section, key, value, message):
    path = write_config(tmp_path, shards)
    config = json.loads(open(path).read())
    config[section][key] = value
    open(path, "w").write(json.dumps(config))
    with pytest.raises(SystemExit, match=message) as error:
        pretrain.main(["--config", path])
    assert path in str(error.value)


def test_char_mask_fraction_needs_dynamic_shards(tmp_path, shards):
    path = write_config(tmp_path, shards)
    config = json.loads(open(path).read())
    config["data"]["char_mask_fraction"] = 0.5
    open(path, "w").write(json.dumps(config))
    with pytest.raises(SystemExit, match="char_mask_fraction=0.5.*shards of dynamic masks") as error:
        pretrain.main(["--config", path])
    assert path in str(error.value)


def test_every_builder_key_pretrains(tmp_path, shards):
    path = write_config(tmp_path, shards)
    config = json.loads(open(path).read())
    config["model_config"].update(initializer_range=0.02, layer_norm_eps=1e-6, architectures=["GAUAlpha"])
    open(path, "w").write(json.dumps(config))
    assert pretrain.main(["--config", path]) == 0


def test_shipped_configs_load_and_the_twins_train_like_the_bundled_model():
    import pathlib

    folder = pathlib.Path(__file__).resolve().parents[3] / "pretrain" / "configs"
    configs = {path.name: config_lib.load(str(path)) for path in sorted(folder.glob("*.json"))}
    assert len(configs) >= 7

    def recipe(name):  # everything but the model and where it is written, stage by stage
        stages = config_lib.stage_configs(configs[name])
        for _, stage in stages:
            for key in ("model", "model_config", "config_path"):
                stage.pop(key, None)
            stage["train"]["output_dir"] = None
        return stages

    bundled = recipe("small.json")
    assert [(end, s["data"]["char_mask_fraction"]) for end, s in bundled] == [
        (2008, 0.0),
        (6000, 0.5),
        (6500, 0.6),
        (10000, 0.6),
    ]
    for twin in ("small_roformer_v2.json", "small_softmax.json"):
        assert recipe(twin) == bundled, twin


def _edit(path, **sections):
    config = json.loads(open(path).read())
    for section, values in sections.items():
        if isinstance(values, dict):
            config[section].update(values)
        else:
            config[section] = values
    open(path, "w").write(json.dumps(config))
    return path


def test_data_problems_and_a_missing_checkpoint_are_found_before_any_update(tmp_path, shards):
    vocab, _, vocab_size = shards
    other = tmp_path / "other_vocab.txt"
    other.write_text(open(vocab, encoding="utf-8").read() + "extra\n", encoding="utf-8")
    path = _edit(
        write_config(tmp_path, shards),
        vocab=str(other),
        model_config={
            **json.loads(open(write_config(tmp_path, shards, "plain")).read())["model_config"],
            "vocab_size": vocab_size + 1,
        },
    )
    with pytest.raises(
        SystemExit,
        match=r"another vocab: .*mlm/summary\.json records a vocab of "
        rf"{vocab_size} tokens .* but {other} has {vocab_size + 1}",
    ):
        pretrain.main(["--config", path])
    assert not (tmp_path / "run").exists()  # before the first update
    path = write_config(tmp_path, shards, "eval")
    with pytest.raises(SystemExit, match=r"no files match file_pattern='.*nothing-\*'"):
        pretrain.main(["--config", path, "--eval-data", str(tmp_path / "nothing-*")])
    assert not (tmp_path / "eval").exists()
    for flag in ("--export-only", "--evaluate-only"):
        with pytest.raises(SystemExit, match=rf"{flag}: no checkpoint in .*eval/checkpoints; train first"):
            pretrain.main(["--config", path, flag])
    assert not (tmp_path / "eval" / "export").exists()


def test_an_init_checkpoint_of_another_size_is_a_one_line_error(tmp_path, shards):
    from tests.model_utils import random_checkpoint

    _, checkpoint = random_checkpoint(str(tmp_path), vocab_size=shards[2], hidden_size=24, attention_key_size=8)
    path = write_config(tmp_path, shards)
    with pytest.raises(SystemExit) as stopped:
        pretrain.main(["--config", path, "--init-checkpoint", checkpoint])
    message = str(stopped.value)
    assert message.startswith(f"error: train.init_checkpoint {checkpoint} does not fit the gau_alpha model of {path}")
    assert "shape" in message and "\n" not in message


def test_a_full_disk_while_checkpointing_keeps_the_previous_checkpoint(tmp_path, shards):
    import tensorflow as tf

    from gau_keras.training.pretrain.trainer import Trainer

    trainer = Trainer(config_lib.load(write_config(tmp_path, shards, "full", steps=3, save_every=1)), xla=False)
    save = trainer.state.manager.save

    def save_until_full(checkpoint_number):
        if checkpoint_number < 2:
            return save(checkpoint_number=checkpoint_number)
        temp = tmp_path / "full" / "checkpoints" / f"ckpt-{checkpoint_number}_temp"
        temp.mkdir()
        (temp / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"")
        raise tf.errors.ResourceExhaustedError(None, None, f"{temp}/part-00000: No space left on device")

    trainer.state.manager.save = save_until_full
    with pytest.raises(RunDirError) as stopped:
        trainer.train()
    folder = tmp_path / "full" / "checkpoints"
    assert str(stopped.value) == (
        f"cannot write checkpoint 2 to {folder}: no space left on device; the "
        f"previous checkpoint ckpt-1 is kept; free some space and start the run again "
        f"to resume"
    )
    assert sorted(os.listdir(folder)) == ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index"]

    # an export cut short leaves nothing under export/ (it was written in place)
    def cut_short(filename, *args, **kwargs):
        open(filename + ".index", "wb").write(b"\x00" * 10)
        raise OSError(28, "No space left on device")

    trainer.transformer.save_weights_as_checkpoint = cut_short
    with pytest.raises(OSError):
        trainer.export()
    assert not (tmp_path / "full" / "export").exists()
    del trainer.transformer.save_weights_as_checkpoint
    assert {"bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index", "vocab.txt"} <= set(
        os.listdir(trainer.export())
    )
    assert not (tmp_path / "full" / "export.partial").exists()


def test_jax_checkpoints_in_the_run_directory_are_refused(tmp_path, shards):
    path = write_config(tmp_path, shards)
    (tmp_path / "run" / "checkpoints" / "3").mkdir(parents=True)  # an orbax step of a JAX run
    with pytest.raises(SystemExit) as stopped:
        pretrain.main(["--config", path])
    assert str(stopped.value) == (
        f"error: {tmp_path / 'run' / 'checkpoints'} holds orbax checkpoints (N/, of JAX) up to update 3, written "
        f"under KERAS_BACKEND=jax; resume the run there, or pass --restart to move them aside and start from "
        f"update 0 under KERAS_BACKEND=tensorflow"
    )
    assert pretrain.main(["--config", path, "--restart", "--steps", "1"]) == 0


def test_two_devices_give_the_one_device_losses(tmp_path, shards):
    """--devices 2: MirroredStrategy over 2 logical CPUs (a fresh process: they are set up
    before TensorFlow starts). Dropout 0: each replica draws its own rows' masks."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    def config(name):
        return _edit(
            write_config(tmp_path, shards, name, steps=3),
            model_config={
                **json.loads(open(write_config(tmp_path, shards, "plain")).read())["model_config"],
                "hidden_dropout_prob": 0.0,
                "attention_probs_dropout_prob": 0.0,
            },
        )

    assert pretrain.main(["--config", config("one")]) == 0
    result = subprocess.run(
        [sys.executable, "pretrain/pretrain.py", "--config", config("two"), "--devices", "2"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(losses(tmp_path, "two"), losses(tmp_path, "one"), rtol=1e-5)
    with pytest.raises(SystemExit, match="--devices 2: TensorFlow was started before the CPU could be split"):
        pretrain.main(["--config", config("late"), "--devices", "2"])


def test_a_run_removes_its_lock_and_a_rerun_of_a_finished_run_names_restart(tmp_path, shards, capsys):
    path = write_config(tmp_path, shards, steps=1)
    for _ in range(2):
        assert pretrain.main(["--config", path]) == 0
        assert not os.path.lexists(tmp_path / "run" / ".lock")
    assert (
        f"{tmp_path / 'run'} already holds a finished run (update 1 of train.steps=1): nothing to train; pass "
        f"--restart to move it aside and start again from update 0, or a larger --steps to train further"
        in capsys.readouterr().out
    )


def test_an_unusable_output_dir_or_lock_is_a_one_line_error_before_any_work(tmp_path, shards, monkeypatch):
    from gau_keras.training.pretrain import trainer

    def no_work(*args, **kwargs):
        raise AssertionError("the run started working")

    monkeypatch.setattr(trainer.Trainer, "__init__", no_work)
    path = write_config(tmp_path, shards)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's notes")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / ".lock").symlink_to(notes)
    option = "train.output_dir (--output-dir)"
    for output_dir, message in (
        (a_file / "sub", f"{option} {a_file / 'sub'} is not writable (Not a directory)"),
        (a_file, f"{option} {a_file} is a file, not a folder"),
        (
            tmp_path / "linked",
            f"{tmp_path / 'linked' / '.lock'} is a symbolic link, not a run lock file: move "
            f"it away or give another {option}",
        ),
    ):
        with pytest.raises(SystemExit) as stopped:
            pretrain.main(["--config", path, "--output-dir", str(output_dir)])
        assert stopped.value.code == f"error: {message}"
    assert notes.read_text() == "the user's notes" and a_file.read_text() == "x"
