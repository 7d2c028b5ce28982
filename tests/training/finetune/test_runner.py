"""The shared runner end to end (tnews, a tiny random GAU-alpha, a few steps), its options and its batching."""

import itertools
import json
import runpy
import subprocess
import sys

import numpy as np
import pytest

from gau_keras.data.clue import TASKS
from gau_keras.training.finetune import runner, tasks
from gau_keras.training.finetune.batching import PaddedBatches, pad_stack
from gau_keras.training.finetune.task import Feature
from tests.conftest import REPO_ROOT
from tests.finetune_utils import tiny_model_dir


def test_pad_stack_pads_every_axis():
    out = pad_stack([np.ones((2, 3), "int32"), np.full((1, 4), 2, "int32")])
    assert out.shape == (2, 2, 4) and out.dtype == np.int32
    np.testing.assert_array_equal(out[1], [[2, 2, 2, 2], [0, 0, 0, 0]])
    with pytest.raises(ValueError, match="ranks"):
        pad_stack([np.ones(2), np.ones((2, 2))])


def test_padded_batches_order_each_pass_and_keep_every_feature():
    features = [Feature((np.arange(1, n + 2), np.zeros(n + 1, "int32")), n) for n in range(7)]
    batches = PaddedBatches(features, 3, shuffle=True, seed=1)
    assert len(batches) == 3
    orders = []
    for _ in range(2):
        seen = []
        for (ids, segments), labels in batches.tf_dataset().as_numpy_iterator():
            assert ids.shape == segments.shape and ids.shape[1] == labels.max() + 1
            seen.extend(labels.tolist())
        assert sorted(seen) == list(range(7))
        orders.append(seen)
    assert orders[0] != orders[1]
    # a pass started and abandoned (Keras's JAX fit looks at one batch first) does not move the orders on
    again = PaddedBatches(features, 3, shuffle=True, seed=1)
    next(again.tf_dataset().as_numpy_iterator())
    assert [labels.tolist() for _, labels in again.tf_dataset().as_numpy_iterator()] == [
        orders[0][i : i + 3] for i in range(0, 7, 3)
    ]
    (inputs,) = PaddedBatches(features, 4, with_labels=False)[1]
    assert inputs[0].shape == (3, 7)
    with pytest.raises(IndexError):
        batches[3]


def _small_copy(shared_data, target, rows=24):
    """tnews train/dev/test, first `rows` lines each, plus a malformed line in train."""
    folder = target / "tnews"
    folder.mkdir(parents=True)
    texts = []
    for split in ("train", "dev", "test"):
        with open(shared_data / "clue" / "tnews" / f"{split}.json", encoding="utf-8") as f:
            lines = list(itertools.islice(f, rows))
        if split == "train":
            lines.insert(3, '{"sentence": "broken line", "label": \n')
        (folder / f"{split}.json").write_text("".join(lines), encoding="utf-8")
        texts.extend(json.loads(line).get("sentence", "") for line in lines if line.strip().endswith("}"))
    return target, texts


@pytest.mark.both_backends  # the fine-tuning run of the JAX pass (tests/conftest.py)
def test_tnews_end_to_end(tmp_path, shared_data, capsys, monkeypatch):
    data_dir, texts = _small_copy(shared_data, tmp_path / "data")
    model_dir = tiny_model_dir(str(tmp_path / "model"), texts)
    out_dir = tmp_path / "out"
    argv = [
        "--data-dir",
        str(data_dir),
        "--model-dir",
        model_dir,
        "--out-dir",
        str(out_dir),
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--maxlen",
        "32",
        "--max-eval-examples",
        "16",
        "--seed",
        "3",
    ]
    monkeypatch.setattr(sys, "argv", ["finetune", "tnews"] + argv)
    with pytest.warns(UserWarning, match=r"train\.json:4"), pytest.raises(SystemExit) as done:
        # what `python -m finetune tnews` runs
        runpy.run_path(str(REPO_ROOT / "finetune" / "__main__.py"), run_name="__main__")
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "1 malformed skipped" in printed
    assert "epoch 1: dev accuracy=" in printed and "epoch 2: dev accuracy=" in printed

    predictions = [json.loads(line) for line in (out_dir / "tnews_predict.json").read_text().splitlines()]
    test_ids = [json.loads(line)["id"] for line in (data_dir / "tnews" / "test.json").read_text().splitlines()]
    assert [p["id"] for p in predictions] == test_ids
    assert all(set(p) == {"id", "label"} and p["label"] in TASKS["tnews"].labels for p in predictions)

    record = json.loads((out_dir / "tnews_metrics.json").read_text())
    assert record["module"] == "gau_keras.training.finetune.classification"
    assert [e["epoch"] for e in record["epochs"]] == [1, 2]
    assert record["train_examples"] == 24 and record["dev_examples"] == 16
    assert record["best"]["accuracy"] == max(e["accuracy"] for e in record["epochs"])
    assert (out_dir / "tnews_best.weights.h5").is_file()

    before = (out_dir / "tnews_predict.json").read_bytes()
    assert runner.run("tnews", argv + ["--epochs", "1"]) == 2
    assert "already exist; pass --overwrite (Options.overwrite=True) to replace them" in capsys.readouterr().err
    assert (out_dir / "tnews_predict.json").read_bytes() == before
    with pytest.warns(UserWarning, match=r"train\.json:4"):
        assert (
            runner.run("tnews", argv + ["--epochs", "0", "--overwrite", "--max-test-examples", "5", "--from-scratch"])
            == 0
        )
    assert len((out_dir / "tnews_predict.json").read_text().splitlines()) == 5
    record = json.loads((out_dir / "tnews_metrics.json").read_text())
    assert record["args"]["from_scratch"] and [e["epoch"] for e in record["epochs"]] == [0]


def test_missing_model_dir_and_bad_arguments_are_errors(tmp_path, capsys):
    argv = ["--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "out")]
    (tmp_path / "train.json").write_text('{"sentence": "x", "label": "100"}\n')
    (tmp_path / "dev.json").write_text('{"sentence": "x", "label": "100"}\n')
    assert runner.run("tnews", argv + ["--model-dir", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        runner.run("tnews", argv + ["--model", "gpt2"])


def test_labels_outside_the_label_set_stop_the_run_naming_the_line(tmp_path, capsys):
    (tmp_path / "train.json").write_text('{"sentence": "x", "label": "100"}\n{"sentence": "y", "label": "105"}\n')
    argv = ["--data-dir", str(tmp_path), "--out-dir", str(tmp_path / "out"), "--model-dir", str(tmp_path)]
    assert runner.run("tnews", argv) == 2
    assert "train.json:2" in capsys.readouterr().err


@pytest.mark.parametrize("task", tasks.names())
def test_every_task_has_the_command_line(task, capsys):
    with pytest.raises(SystemExit) as done:
        runner.main([task, "--help"], prog="python -m finetune")
    assert done.value.code == 0
    usage = capsys.readouterr().out
    for option in (
        "--data-dir",
        "--model-dir",
        "--model",
        "--epochs",
        "--batch-size",
        "--maxlen",
        "--lr",
        "--max-train-examples",
        "--seed",
        "--overwrite",
        "--from-scratch",
        "--task-name",
    ):
        assert option in usage
    assert usage.startswith(f"usage: python -m finetune {task} ")
    assert TASKS[task].about.split(" ")[0] in usage
    args = runner.build_parser(task).parse_args(["--data-dir", "x"])
    assert {key: getattr(args, key) for key in runner.TASK_DEFAULTS} == dict(TASKS[task].defaults)
    assert args.task_name == task and task in tasks.names()


def test_the_task_choices_and_the_model_names_come_from_the_registries(capsys):
    from gau_keras.models.builder import MODELS, model_names

    assert tasks.names() == sorted(name for name, spec in TASKS.items() if spec.head)
    assert runner.main(["nosuchtask"]) == 2 and "cluewsc" in capsys.readouterr().err
    assert model_names() == (
        "bert",
        "albert",
        "albert_unshared",
        "nezha",
        "roformer",
        "electra",
        "gau_alpha",
        "roformer_v2",
        "srupp",
        "gpt",
        "gpt2",
        "gpt2_ml",
        "t5",
        "t5_encoder",
        "t5_decoder",
    ) and set(model_names()) <= set(MODELS)
    parser = runner.build_parser("tnews")
    model = next(a for a in parser._actions if a.dest == "model")
    fine_tunable = {name for name, cls in MODELS.items() if cls.takes_segment_ids and cls.is_encoder}
    assert set(model.choices) == fine_tunable and "srupp" not in fine_tunable  # no segment input
    assert "gpt" not in fine_tunable  # a language model: no hidden states to classify
    assert parser.parse_args(["--data-dir", "x", "--model", "RoFormer-V2"]).model
    assert model_names(segment_ids=True) == model_names()[:8]  # not srupp, the GPTs, T5
    assert tasks.same_model("bustm") == ("bustm", "afqmc", "cmnli", "ocnli", "ocnli_full")
    with pytest.raises(SystemExit):
        runner.parse_options("afqmc", ["--data-dir", "x", "--task-name", "tnews"])  # another input form


def test_options_check_each_value_once_and_name_the_argument():
    options = runner.Options.for_task("cmrc2018", data_dir="x")
    assert (options.maxlen, options.epochs, options.dropout) == (256, 2, 0.1)
    for name, value, message in (
        ("maxlen", 0, "maxlen must be an integer >= 8, got 0"),
        ("lr", 0.0, "lr must be > 0, got 0"),
        ("dropout", 1.0, "dropout must be in [0, 1), got 1"),
        ("epochs", 1.5, "epochs: expected an integer, got '1.5'"),
        (
            "model",
            "gpt3",
            "model must be one of bert, albert, albert_unshared, nezha, roformer, electra, gau_alpha, roformer_v2, got",
        ),
        (
            "model",
            "srupp",
            "model 'srupp' reads no segment ids, which the CLUE tasks feed: fine-tune one of bert, albert,",
        ),
        ("model", "gpt", "model 'gpt' is a language model (its output is the next-token distribution"),
        ("xla", "maybe", "xla must be one of auto, on, off"),
    ):
        with pytest.raises(ValueError) as refused:
            runner.Options.for_task("tnews", data_dir="x", **{name: value})
        assert str(refused.value).startswith(message), str(refused.value)
    with pytest.raises(ValueError, match="unknown fine-tuning task 'nosuch'"):
        runner.Options("nosuch", "x")
    parsed = runner.parse_options("cmrc2018", ["--data-dir", "x", "--doc-stride", "64"])
    assert parsed.head_options == {"doc_stride": 64, "max_question_len": 64, "max_answer_len": 32}
    assert parsed.record()["doc_stride"] == 64 and "head_options" not in parsed.record()


def tnews_on_one_and_two_devices(shared_data, tmp_path):
    """The metrics records of tnews fine-tuned (dropout 0, seed 3) on 1 device, in this process,
    and on 2, in a fresh one (the device split must happen before TensorFlow starts)."""
    data_dir, texts = _small_copy(shared_data, tmp_path / "data", rows=48)
    model_dir = tiny_model_dir(str(tmp_path / "model"), texts)
    config_path = tmp_path / "model" / "bert_config.json"
    config = json.loads(config_path.read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config_path.write_text(json.dumps(config))
    records = {}
    for devices in (1, 2):
        out = tmp_path / f"out{devices}"
        argv = [
            "--data-dir",
            str(data_dir),
            "--model-dir",
            model_dir,
            "--out-dir",
            str(out),
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--maxlen",
            "32",
            "--seed",
            "3",
            "--lr",
            "1e-3",
            "--dropout",
            "0",
            "--devices",
            str(devices),
        ]
        if devices == 1:
            assert runner.run("tnews", argv) == 0
        else:
            result = subprocess.run(
                [sys.executable, "-m", "finetune", "tnews", *argv],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, result.stderr[-3000:]
        records[devices] = json.loads((out / "tnews_metrics.json").read_text())
    return records


@pytest.mark.tensorflow_only  # MirroredStrategy; JAX's DataParallel: tests/training/finetune/test_backends.py
def test_two_devices_give_the_same_dev_metric(tmp_path, shared_data):
    """MirroredStrategy on 2 logical CPU devices vs one device. Dropout 0: with dropout each
    replica draws its own masks."""
    records = tnews_on_one_and_two_devices(shared_data, tmp_path)
    one, two = records[1], records[2]
    assert [e["accuracy"] for e in two["epochs"]] == [e["accuracy"] for e in one["epochs"]]
    # Equal in exact arithmetic: the replicas' gradients sum to the one-device gradient within
    # float32 round-off (~1e-7 relative), which Adam's normalised steps amplify over the 12
    # updates: measured 3e-5 to 2.2e-4 relative on the epoch losses over seeds 3-5.
    assert [e["train_loss"] for e in two["epochs"]] == pytest.approx([e["train_loss"] for e in one["epochs"]], rel=1e-3)
    assert (one["replicas"], two["replicas"]) == (1, 2)


def test_task_specs_pickle_and_copy():
    import copy
    import pickle

    spec = TASKS["tnews"]
    assert pickle.loads(pickle.dumps(spec)) == spec and copy.deepcopy(spec) == spec


def test_a_seed_that_is_no_integer_is_named():
    with pytest.raises(ValueError, match=r"^seed must be of type int, got 1.5"):
        runner.Options.for_task("tnews", data_dir="x", seed=1.5)
