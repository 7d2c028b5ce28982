"""Tiny random model directories (config + TF1 checkpoint + vocab) for the finetune tests."""
import os

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
    import pytest

    from tests.conftest import SHARED_DATA

    vocab = SHARED_DATA / "vocab" / "gau_alpha_vocab.txt"
    if not vocab.is_file():
        pytest.skip(f"{vocab} is absent (set GAU_KERAS_DATA to point at the shared data)")
    directory = tmp_path_factory.mktemp("model")
    (directory / "vocab.txt").write_bytes(vocab.read_bytes())
    random_checkpoint(str(directory), vocab_size=12000, **overrides)
    return str(directory)
