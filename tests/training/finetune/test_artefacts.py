"""What a fine-tuning run leaves behind: ``<task>_best.keras`` reloads in a fresh
process that imports only gau_keras and predicts what the trained model
predicts, for every head kind (classification, span, multiple choice,
candidate scoring, GlobalPointer); the runs are the session's ``head_kind_runs``
(tests/conftest.py), which tests/training/finetune/test_backends.py compares with JAX's."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gau_keras.training.finetune import runner, tasks
from gau_keras.training.finetune.batching import PaddedBatches
from tests.finetune_utils import HEAD_KIND_TASKS, head_kind_argv

#: one fresh process reloads every task's .keras: argv[1] is a JSON list of [model, [inputs], output]
PREDICT = """
import json, sys
import numpy as np
import gau_keras, keras
for model_path, input_paths, output in json.loads(sys.argv[1]):
    model = keras.saving.load_model(model_path)
    inputs = [np.load(p) for p in input_paths]
    np.save(output, np.asarray(model.predict(inputs, verbose=0)))
"""


def trained_model_and_inputs(args, out_dir):
    """The run's model rebuilt from its best weights, and one batch of dev inputs."""
    task_cls = tasks.task_class(args.task_name)
    transformer, tokenizer = runner.build_transformer(args, task_cls)
    task = task_cls(args.task_name, tokenizer, args.maxlen, **args.head_options)
    model = task.build_model(transformer)
    model.load_weights(str(out_dir / f"{args.task_name}_best.weights.h5"))
    dev = runner.load_split(args.task_name, "dev", args.data_dir, args.max_eval_examples, seed=runner.DEV_SUBSET_SEED)
    features = runner.encode(task, dev, training=False)
    (inputs,) = PaddedBatches(features, 4, with_labels=False)[0]
    return model, list(inputs)


@pytest.fixture(scope="module")
def reloaded(tmp_path_factory, head_kind_runs):
    """Per task: (record, the trained model's predictions, the fresh process's predictions of its .keras)."""
    model_dir, root, records = head_kind_runs
    inputs_root = tmp_path_factory.mktemp("artefacts")
    runs, jobs = {}, []
    for task in HEAD_KIND_TASKS:
        out_dir, record = root / task, records[task]
        args = runner.parse_options(task, head_kind_argv(task, model_dir, out_dir))
        model, inputs = trained_model_and_inputs(args, out_dir)
        paths = [str(inputs_root / f"{task}_input{i}.npy") for i in range(len(inputs))]
        for path, array in zip(paths, inputs):
            np.save(path, array)
        got = inputs_root / f"{task}_got.npy"
        runs[task] = (record, np.asarray(model.predict(inputs, verbose=0)), got)
        jobs.append([record["model"], paths, str(got)])
    env = {k: v for k, v in os.environ.items() if k != "GAU_KERAS_TF_FREE"}
    result = subprocess.run(
        [sys.executable, "-c", PREDICT, json.dumps(jobs)],
        cwd=inputs_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {task: (record, expected, np.load(got)) for task, (record, expected, got) in runs.items()}


@pytest.mark.parametrize("task", HEAD_KIND_TASKS)
def test_best_keras_reloads_after_import_gau_keras_only(reloaded, task):
    record, expected, got = reloaded[task]
    assert record["model"].endswith(f"{task}_best.keras")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
