"""pretrain/pretrain.py under KERAS_BACKEND=jax (issue 26, item 5).

One JAX process with 2 simulated host devices runs the tiny config of
tests/pretrain_utils.py several ways and records what happened; this
(TensorFlow) process checks:

* a run stopped after update 2 and resumed gives the uninterrupted run's
  losses (orbax checkpoint of model, optimizer, data iterator, dropout RNG);
* 2 devices (keras.distribution.DataParallel) give the 1-device losses;
* the export is the released TF1 layout: loaded here, on TensorFlow, it gives
  the MLM probabilities the JAX process computed (1e-5);
* the step compiles once (its first state placed as it returns it);
* a damaged newest checkpoint is moved aside and the previous one resumes;
  a full disk while checkpointing is a one-line error that keeps the
  previous checkpoint; TensorFlow's checkpoints in the run directory, --tpu
  and --no-xla are one-line errors;
* SRU++ (logits at every position) trains under mixed_float16 (loss scaling);
* a config with stages trains its stages in one process (one Trainer each,
  the second restoring the first's checkpoint).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT
from tests.pretrain_utils import TEXTS, losses, make_shards, write_config

#: the JAX process: tests.training.pretrain.test_jax.jax_side(job)
WORK = "import json, sys\nfrom tests.training.pretrain import test_jax as T\nT.jax_side(json.loads(sys.argv[1]))\n"


def _main(argv):
    """pretrain.main's exit status, or its SystemExit message."""
    from gau_keras.training.pretrain import pretrain

    try:
        return pretrain.main(argv)
    except SystemExit as stop:
        return str(stop)


def _config(root, shards, name, **train):
    return write_config(root, shards, name, **train)


def _damage_newest(run):
    """Overwrites the array data of the newest orbax step with garbage."""
    folder = run / "checkpoints"
    newest = max((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for path in (newest / "state").rglob("*"):
        if path.is_file() and path.parent.name == "d":
            path.write_bytes(b"\x00garbage" * 8)
    return newest.name


def _full_disk_run(root, shards):
    """Update 2's checkpoint meets a full disk: the error and what is left."""
    import errno

    from gau_keras.errors import RunDirError
    from gau_keras.training.pretrain import config as config_lib
    from gau_keras.training.pretrain.trainer import Trainer

    trainer = Trainer(config_lib.load(_config(root, shards, "full", steps=3)), devices=1)
    manager = trainer.state.manager
    save = manager.save_checkpointables

    def save_until_full(update, *args, **kwargs):
        if update < 2:
            return save(update, *args, **kwargs)
        (root / "full" / "checkpoints" / f"{update}.orbax-checkpoint-tmp-1").mkdir()
        raise OSError(errno.ENOSPC, "No space left on device")

    manager.save_checkpointables = save_until_full
    try:
        trainer.train()
    except RunDirError as stop:
        left = sorted(os.listdir(root / "full" / "checkpoints"))
        # the programs jax.jit holds for the step after its 4 calls (jax's own count, a private method)
        return {"message": f"error: {stop}", "left": left, "step_programs": trainer.state._step_fn._cache_size()}
    return {"message": None}


def jax_side(job):
    """Everything the JAX process runs; writes job['out'] (JSON) and the export's probabilities."""
    import pathlib

    import jax
    import keras

    root = pathlib.Path(job["root"])
    # every Trainer compiles its step anew: the same programs, served from JAX's disk cache after the first
    jax.config.update("jax_compilation_cache_dir", str(root / "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    shards = make_shards(root)
    out = {"backend": keras.backend.backend()}
    straight = _config(root, shards, "straight", steps=4)
    out["straight"] = _main(["--config", straight, "--devices", "1"])
    interrupted = _config(root, shards, "interrupted", steps=4)
    out["interrupted"] = [
        _main(["--config", interrupted, "--steps", "2", "--devices", "1"]),
        _main(["--config", interrupted, "--devices", "1"]),
    ]
    out["two"] = _main(["--config", _config(root, shards, "two", steps=4), "--devices", "2"])
    out["evaluate"] = _main(["--config", straight, "--evaluate-only", "--devices", "1"])
    out["damaged"] = _damage_newest(root / "interrupted")
    out["resumed"] = _main(["--config", interrupted, "--steps", "5", "--devices", "1"])
    out["full"] = _full_disk_run(root, shards)
    srupp = _config(root, shards, "srupp")
    config = json.loads(open(srupp).read())
    config["model"] = "srupp"
    config["model_config"] = {
        **{k: config["model_config"][k] for k in ("vocab_size", "hidden_size", "num_hidden_layers")},
        "proj_size": 8,
    }
    config["train"]["precision"] = "mixed_float16"
    open(srupp, "w").write(json.dumps(config))
    out["srupp"] = _main(["--config", srupp])
    staged = _config(root, shards, "staged", steps=4)
    config = json.loads(open(staged).read())
    config["stages"] = [{"until": 2, "optimizer": {"learning_rate": 1e-2, "schedule": {"0": 1}}}]
    open(staged, "w").write(json.dumps(config))
    out["staged"] = _main(["--config", staged, "--devices", "1"])
    (root / "tf_format" / "checkpoints").mkdir(parents=True)
    (root / "tf_format" / "checkpoints" / "ckpt-3.index").write_bytes(b"")
    out["tf_format"] = _main(["--config", _config(root, shards, "tf_format")])
    out["tpu"] = _main(["--config", _config(root, shards, "tpu"), "--tpu", "my-tpu"])
    out["no_xla"] = _main(["--config", _config(root, shards, "no_xla"), "--no-xla"])
    from gau_keras.pretrained import load_pretrained

    model, tokenizer = load_pretrained(str(root / "straight" / "export"), with_mlm=True)
    token_ids, segment_ids = tokenizer.encode(TEXTS[0])
    np.save(root / "probabilities.npy", model.predict([np.array([token_ids]), np.array([segment_ids])], verbose=0))
    (root / "out.json").write_text(json.dumps(out))


@pytest.fixture(scope="module")
def jax_runs(tmp_path_factory, requires_jax):
    root = tmp_path_factory.mktemp("pretrain_jax")
    env = dict(
        os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2"
    )
    result = subprocess.run(
        [sys.executable, "-c", WORK, json.dumps({"root": str(root)})],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return root, json.loads((root / "out.json").read_text()), result.stdout + result.stderr


def _log(root, name):
    return [json.loads(line) for line in (root / name / "log.jsonl").read_text().splitlines()]


def test_resume_gives_the_uninterrupted_losses(jax_runs):
    root, out, _ = jax_runs
    assert out["backend"] == "jax" and out["straight"] == 0 and out["interrupted"] == [0, 0]
    straight = losses(root, "straight")
    assert len(straight) == 4 and all(np.isfinite(straight))
    # 5: the update the damaged checkpoint's resume (below) ran once more
    assert [r["update"] for r in _log(root, "interrupted") if "loss" in r] == [1, 2, 3, 4, 5]
    np.testing.assert_allclose(losses(root, "interrupted")[:4], straight, rtol=1e-6)


def test_two_devices_give_the_one_device_losses(jax_runs):
    root, out, _ = jax_runs
    assert out["two"] == 0
    np.testing.assert_allclose(losses(root, "two"), losses(root, "straight"), rtol=1e-5)


def test_the_export_is_the_tf1_layout_and_predicts_the_same_on_tensorflow(jax_runs):
    root, _, _ = jax_runs
    import keras

    from gau_keras.pretrained import load_pretrained

    assert keras.backend.backend() == "tensorflow"
    export = root / "straight" / "export"
    assert {"bert_config.json", "bert_model.ckpt.index", "vocab.txt"} <= set(os.listdir(export))
    model, tokenizer = load_pretrained(str(export), with_mlm=True)
    token_ids, segment_ids = tokenizer.encode(TEXTS[0])
    here = model.predict([np.array([token_ids]), np.array([segment_ids])], verbose=0)
    np.testing.assert_allclose(here, np.load(root / "probabilities.npy"), atol=1e-5)


def test_evaluate_only_logs_the_held_out_record(jax_runs):
    root, out, _ = jax_runs
    assert out["evaluate"] == 0
    evaluations = [r for r in _log(root, "straight") if "eval_loss" in r]
    assert evaluations[0]["update"] == 4 and evaluations[0]["eval_masked_tokens"] > 0
    assert 0 < evaluations[0]["majority_baseline_accuracy"] < 1


def test_a_damaged_checkpoint_is_moved_aside_and_the_previous_one_resumes(jax_runs):
    root, out, output = jax_runs
    damaged = out["damaged"]
    assert out["resumed"] == 0
    folder = root / "interrupted" / "checkpoints"
    assert f"checkpoint {folder / damaged} does not restore" in output
    assert (folder / "unrestorable" / damaged).is_dir()
    assert f"resumed from {folder / str(int(damaged) - 1)}" in output
    # the previous checkpoint's update ran again and gave the same loss
    log = [r for r in _log(root, "interrupted") if "loss" in r]
    assert [r["update"] for r in log] == [1, 2, 3, 4, 5]
    assert log[3]["loss"] == pytest.approx(losses(root, "straight")[3], rel=1e-6)


def test_a_full_disk_keeps_the_previous_checkpoint(jax_runs):
    root, out, _ = jax_runs
    folder = root / "full" / "checkpoints"
    assert out["full"]["message"] == (
        f"error: cannot write checkpoint 2 to {folder}: no space left on device; the "
        f"previous checkpoint 1 is kept; free some space and start the run again "
        f"to resume"
    )
    assert out["full"]["left"] == ["1"]


def test_the_step_compiles_once(jax_runs):
    """The first call's state (the Keras variables' values, uncommitted) is
    placed as the step returns it: one program for every call."""
    _, out, _ = jax_runs
    assert out["full"]["step_programs"] == 1


def test_srupp_trains_under_mixed_float16(jax_runs):
    root, out, _ = jax_runs
    assert out["srupp"] == 0
    assert (root / "srupp" / "export" / "bert_model.ckpt.index").exists()
    assert len(losses(root, "srupp")) == 2 and all(np.isfinite(losses(root, "srupp")))
    assert all(r["loss_scale"] > 0 for r in _log(root, "srupp"))


def test_stages_resume_from_each_other_in_one_process(jax_runs):
    root, out, output = jax_runs
    assert out["staged"] == 0
    log = [r for r in _log(root, "staged") if "loss" in r]
    assert [r["update"] for r in log] == [1, 2, 3, 4]
    assert [r["learning_rate"] for r in log[:2]] == pytest.approx([1e-2, 1e-2])
    assert f"resumed from {root / 'staged' / 'checkpoints' / '2'}: update 2" in output
    # the first stage's updates are the straight run's but for the learning rate: update 1 is the same
    assert log[0]["loss"] == pytest.approx(losses(root, "straight")[0], rel=1e-6)


def test_what_jax_cannot_do_is_a_one_line_error(jax_runs):
    root, out, _ = jax_runs
    assert out["tf_format"] == (
        f"error: {root / 'tf_format' / 'checkpoints'} holds TensorFlow checkpoints (ckpt-N.index) up to update 3, "
        f"written under KERAS_BACKEND=tensorflow; resume the run there, or pass --restart to move them aside and "
        f"start from update 0 under KERAS_BACKEND=jax"
    )
    assert out["tpu"].startswith("error: --tpu my-tpu: naming a TPU is TensorFlow's TPUStrategy")
    assert out["no_xla"].startswith("error: --no-xla: under KERAS_BACKEND=jax the training step is always compiled")
    for message in (out["tf_format"], out["tpu"], out["no_xla"]):
        assert "\n" not in message
