"""What a fine-tuning run leaves behind: ``<task>_best.keras`` reloads in a fresh
process that imports only gau_keras and predicts what the trained model
predicts, for every head kind (classification, span, multiple choice,
candidate scoring, GlobalPointer)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from finetune import runner
from finetune.batching import PaddedBatches
from finetune.c3 import C3Task
from finetune.chid import ChidTask
from finetune.cluener import ClueNerTask
from finetune.cmrc2018 import Cmrc2018Task
from finetune.tnews import TnewsTask
from tests.conftest import SHARED_DATA
from tests.model_utils import random_checkpoint

HEAD_KINDS = [(TnewsTask, "tnews"), (Cmrc2018Task, "cmrc2018"), (C3Task, "c3"), (ChidTask, "chid"),
              (ClueNerTask, "cluener")]
PREDICT = """
import json, sys
import numpy as np
import gau_keras, keras
model = keras.saving.load_model(sys.argv[1])
inputs = [np.load(p) for p in json.loads(sys.argv[2])]
np.save(sys.argv[3], np.asarray(model.predict(inputs, verbose=0)))
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random GAU-alpha with the real 12000-token vocab (covers every task's text)."""
    vocab = SHARED_DATA / "vocab" / "gau_alpha_vocab.txt"
    if not vocab.is_file():
        pytest.skip(f"{vocab} is absent (set GAU_KERAS_DATA to point at the shared data)")
    directory = tmp_path_factory.mktemp("model")
    (directory / "vocab.txt").write_bytes(vocab.read_bytes())
    random_checkpoint(str(directory), vocab_size=12000)
    return str(directory)


def run_task(task_cls, task, model_dir, out_dir, *extra):
    argv = ["--data-dir", str(SHARED_DATA / "clue"), "--task-name", task, "--model-dir", model_dir,
            "--out-dir", str(out_dir), "--epochs", "1", "--batch-size", "4", "--maxlen", "48",
            "--max-train-examples", "8", "--max-eval-examples", "6", "--max-test-examples", "3", *extra]
    assert runner.run(task_cls, argv) == 0
    return runner.build_parser(task_cls).parse_args(argv)


def trained_model_and_inputs(task_cls, args, out_dir):
    """The run's model rebuilt from its best weights, and one batch of dev inputs."""
    transformer, tokenizer = runner.build_transformer(args, task_cls)
    task = task_cls(args.task_name, tokenizer, args.maxlen, **task_cls.options(args))
    model = task.build_model(transformer)
    model.load_weights(str(out_dir / f"{args.task_name}_best.weights.h5"))
    dev = runner.load_split(args.task_name, "dev", args.data_dir, args.max_eval_examples,
                            seed=runner.DEV_SUBSET_SEED)
    features = runner.encode(task, dev, training=False)
    (inputs,) = PaddedBatches(features, 4, with_labels=False)[0]
    return model, list(inputs)


@pytest.mark.parametrize("task_cls, task", HEAD_KINDS, ids=[t for _, t in HEAD_KINDS])
def test_best_keras_reloads_after_import_gau_keras_only(tmp_path, model_dir, task_cls, task):
    out_dir = tmp_path / "out"
    args = run_task(task_cls, task, model_dir, out_dir)
    record = json.loads((out_dir / f"{task}_metrics.json").read_text())
    assert record["model"] == str(out_dir / f"{task}_best.keras")
    model, inputs = trained_model_and_inputs(task_cls, args, out_dir)
    expected = np.asarray(model.predict(inputs, verbose=0))
    paths = []
    for i, array in enumerate(inputs):
        paths.append(str(tmp_path / f"input{i}.npy"))
        np.save(paths[-1], array)
    env = {k: v for k, v in os.environ.items() if k != "GAU_KERAS_TF_FREE"}
    result = subprocess.run([sys.executable, "-c", PREDICT, record["model"], json.dumps(paths),
                             str(tmp_path / "got.npy")], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "got.npy"), expected, rtol=1e-5, atol=1e-5)
