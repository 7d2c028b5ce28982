"""Tiny random model directories (config + TF1 checkpoint + vocab) for the finetune tests, and
the runs of one task per head kind that tests/training/finetune/test_backends.py and
tests/training/finetune/test_artefacts.py share (the ``head_kind_runs`` fixture of tests/conftest.py)."""

import json
import os

import pytest

from gau_keras.training.finetune import runner
from tests.conftest import SHARED_DATA
from tests.model_utils import random_checkpoint

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def vocab_from_texts(texts, extra=("<", ">", "[", "]", "；")):
    """Special tokens, then ``extra``, then every character of ``texts`` once (first-seen order)."""
    tokens = list(SPECIAL_TOKENS)
    seen = set(tokens)
    for token in list(extra) + [ch.lower() for text in texts for ch in text if not ch.isspace()]:
        if token not in seen:
            seen.add(token)
            tokens.append(token)
    return tokens


def tiny_model_dir(directory, texts, model="gau_alpha", seed=0):
    """Writes bert_config.json, bert_model.ckpt.* and vocab.txt of a tiny random model; returns the directory."""
    os.makedirs(directory, exist_ok=True)
    vocab = vocab_from_texts(texts)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    random_checkpoint(directory, model=model, seed=seed, vocab_size=len(vocab))
    return directory


def real_vocab_model_dir(tmp_path_factory, **overrides):
    """A tiny random GAU-alpha with the real 12000-token vocab (covers every task's text), its
    config updated with ``overrides``; skips the test when the shared vocab is absent."""
    vocab = SHARED_DATA / "vocab" / "gau_alpha_vocab.txt"
    if not vocab.is_file():
        pytest.skip(f"{vocab} is absent (set GAU_KERAS_DATA to point at the shared data)")
    directory = tmp_path_factory.mktemp("model")
    (directory / "vocab.txt").write_bytes(vocab.read_bytes())
    random_checkpoint(str(directory), vocab_size=12000, **overrides)
    return str(directory)


#: one task per head kind: classification, span, multiple choice, candidate scoring, GlobalPointer
HEAD_KIND_TASKS = ["tnews", "cmrc2018", "c3", "chid", "cluener"]


def head_kind_argv(task, model_dir, out_dir):
    """The shared runs' arguments: 2 epochs of 2 steps, dropout 0, seed 3."""
    return [
        "--data-dir",
        str(SHARED_DATA / "clue"),
        "--model-dir",
        str(model_dir),
        "--out-dir",
        str(out_dir),
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--maxlen",
        "48",
        "--max-train-examples",
        "8",
        "--max-eval-examples",
        "6",
        "--max-test-examples",
        "2",
        "--dropout",
        "0",
        "--seed",
        "3",
        "--lr",
        "1e-3",
    ]


def run_head_kinds(root, model_dir, two_devices=False):
    """Runs every head kind's task into root/<task>; returns {task: metrics record}. With
    ``two_devices`` (JAX with 2 host devices) tnews also runs with ``--devices 2``: "tnews@2"."""
    records = {}
    runs = [(task, task, []) for task in HEAD_KIND_TASKS]
    if two_devices:
        runs.append(("tnews", "tnews@2", ["--devices", "2"]))
    for task, key, extra in runs:
        out_dir = root / key.replace("@", "_")
        assert runner.run(task, head_kind_argv(task, model_dir, out_dir) + extra) == 0
        records[key] = json.loads((out_dir / f"{task}_metrics.json").read_text())
    return records
