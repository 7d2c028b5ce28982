"""Fine-tuning the BERT family (issue 38, item 5): `python -m finetune TASK --model bert
--model-dir DIR` on a tiny random checkpoint of each model with the real vocab."""

import json

import numpy as np
import pytest

from gau_keras.training.finetune import runner
from tests.finetune_utils import HEAD_KIND_TASKS, head_kind_argv, real_vocab_model_dir

pytestmark = pytest.mark.slow


def model_dir(tmp_path_factory, model):
    """A tiny random ``model`` with the real vocab and, as released checkpoints, its heads' weights."""
    heads = {} if model == "electra" else {"with_nsp": True, "with_mlm": True}
    return real_vocab_model_dir(tmp_path_factory, model=model, heads=heads)


def run(task, model, directory, out_dir):
    assert runner.run(task, head_kind_argv(task, directory, out_dir) + ["--model", model]) == 0
    return json.loads((out_dir / f"{task}_metrics.json").read_text())


def test_bert_fine_tunes_every_head_kind(tmp_path, tmp_path_factory):
    directory = model_dir(tmp_path_factory, "bert")
    for task in HEAD_KIND_TASKS:  # classification, span, multiple choice, MLM candidates, GlobalPointer
        record = run(task, "bert", directory, tmp_path / task)
        assert record["args"]["model"] == "bert" and [e["epoch"] for e in record["epochs"]] == [1, 2], task
        assert all(np.isfinite(e["train_loss"]) for e in record["epochs"]), record["epochs"]


@pytest.mark.parametrize("model", ["albert", "nezha", "roformer", "electra"])
def test_the_other_encoders_fine_tune(tmp_path, tmp_path_factory, model):
    directory = model_dir(tmp_path_factory, model)
    record = run("tnews", model, directory, tmp_path / "tnews")
    assert record["args"]["model"] == model and all(np.isfinite(e["train_loss"]) for e in record["epochs"])


def test_an_mlm_task_on_electra_is_refused_naming_the_head(tmp_path, tmp_path_factory, capsys):
    directory = model_dir(tmp_path_factory, "electra")
    assert runner.run("chid", head_kind_argv("chid", directory, tmp_path / "chid") + ["--model", "electra"]) == 2
    assert "MLM head, which model 'electra' does not have" in capsys.readouterr().err
