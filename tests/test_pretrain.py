"""pretrain/pretrain.py on a tiny config: a short run, kill-and-resume
reproducing the next losses, export loading back, config errors."""
import json

import numpy as np
import pytest

from pretrain import bundle_model, pretrain
from pretrain import config as config_lib
from tests.pretrain_utils import TEXTS, losses, make_shards, write_config


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return make_shards(tmp_path_factory.mktemp("corpus"))


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
    with pytest.raises(SystemExit):   # no silent overwrite
        bundle_model.main(["--run-dir", str(tmp_path / "run"), "--config", path, "--output", str(bundled)])


def test_resume_continues_step_count_and_reproduces_losses(tmp_path, shards):
    straight = write_config(tmp_path, shards, "straight", steps=4)
    assert pretrain.main(["--config", straight]) == 0
    interrupted = write_config(tmp_path, shards, "interrupted", steps=4)
    assert pretrain.main(["--config", interrupted, "--steps", "2"]) == 0   # "killed" after update 2
    assert pretrain.main(["--config", interrupted]) == 0                   # resumes at update 2
    log = [json.loads(line) for line in (tmp_path / "interrupted" / "log.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log] == [1, 2, 3, 4]
    np.testing.assert_allclose(losses(tmp_path, "interrupted"), losses(tmp_path, "straight"), rtol=1e-5)


def test_evaluate_reports_majority_baseline(tmp_path, shards):
    from pretrain.trainer import Trainer
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
    with pytest.raises(SystemExit, match="stpes"):
        config_lib.load(str(bad))
    config["train"].pop("stpes")
    config["model_config"]["vocab_size"] = 7
    bad.write_text(json.dumps(config))
    with pytest.raises(SystemExit, match="vocab_size=7"):
        pretrain.main(["--config", str(bad)])


def test_sigterm_saves_the_current_update(tmp_path, shards, monkeypatch):
    import signal

    from pretrain.trainer import Trainer
    trainer = Trainer(config_lib.load(write_config(tmp_path, shards, "term", steps=50, save_every=100)), xla=False)
    log = Trainer._log

    def log_then_terminate(self, update, *args):
        record = log(self, update, *args)
        if update == 3:
            signal.raise_signal(signal.SIGTERM)
        return record

    monkeypatch.setattr(Trainer, "_log", log_then_terminate)
    trainer.train()
    assert trainer.updates() == 3
    assert trainer.manager.latest_checkpoint.endswith("ckpt-3")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("model, model_config", [
    ("roformer_v2", {"num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "relu"}),
    ("srupp", {"proj_size": 8}),
])
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


@pytest.mark.parametrize("section, key, value, message", [
    ("data", "batch_size", 0, "data.batch_size must be an integer >= 1, got 0"),
    ("train", "steps", "80", 'train.steps must be an integer >= 1, got "80"'),
    ("optimizer", "learning_rate", -1, "optimizer.learning_rate must be a number >= 0, got -1"),
    ("optimizer", "beta_2", 1.0, "optimizer.beta_2 must be < 1"),
    ("data", "char_mask_fraction", 1.5, "data.char_mask_fraction must be <= 1, got 1.5"),
    ("train", "xla", "yes", 'train.xla must be true or false or null, got "yes"'),
    ("data", "pair_segments", 1, "data.pair_segments must be true or false, got 1"),
    ("model_config", "hidden_size", -1, "hidden_size must be an integer >= 1, got -1"),
])
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
