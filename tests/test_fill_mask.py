"""The fill-mask entry point on a tiny random model directory."""
import shutil

import numpy as np
import pytest

from gau_keras import __main__ as cli
from gau_keras.fill_mask import encode_with_masks, fill_mask
from gau_keras.pretrained import load_pretrained, model_files
from gau_keras.tokenizers import Tokenizer
from tests.conftest import load_benchmark
from tests.model_utils import random_checkpoint

CHARS = "今天气很好。我们去公园散步"


@pytest.fixture
def model_dir(tmp_path):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(CHARS)
    tokens += [f"[unused{i}]" for i in range(60 - len(tokens))]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    random_checkpoint(str(tmp_path))
    return tmp_path


def test_encode_with_masks_keeps_mask_tokens(model_dir):
    tokenizer = Tokenizer(str(model_dir / "vocab.txt"))
    ids, segments, positions = encode_with_masks(tokenizer, "今天[MASK]气很[MASK]。")
    tokens = tokenizer.ids_to_tokens(ids)
    assert tokens == ["[CLS]", "今", "天", "[MASK]", "气", "很", "[MASK]", "。", "[SEP]"]
    assert positions == [3, 6] and segments == [0] * 9
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        encode_with_masks(tokenizer, "今天天气很好")


def test_fill_mask_returns_sorted_probabilities(model_dir):
    model, tokenizer = load_pretrained(str(model_dir), with_mlm=True)
    (candidates,) = fill_mask(model, tokenizer, "今天天气很[MASK]。", top_k=4)
    probs = [p for _, p in candidates]
    assert len(candidates) == 4 and probs == sorted(probs, reverse=True)
    ids, segments, positions = encode_with_masks(tokenizer, "今天天气很[MASK]。")
    full = model.predict([np.array([ids]), np.array([segments])], verbose=0)[0, positions[0]]
    assert candidates[0] == (tokenizer.id_to_token(int(full.argmax())), pytest.approx(float(full.max()), rel=1e-5))


def test_cli_prints_top_k(model_dir, capsys):
    assert cli.main(["fill-mask", "--model-dir", str(model_dir), "--top-k", "3", "我们去公[MASK]散步"]) == 0
    out = capsys.readouterr().out
    assert "[MASK] #1:" in out and len(out.splitlines()[-1].strip().split("  ")) == 3


def test_cli_errors_name_the_missing_file(model_dir, tmp_path, capsys):
    (model_dir / "vocab.txt").unlink()
    assert cli.main(["fill-mask", "--model-dir", str(model_dir), "今[MASK]"]) == 2
    assert "vocab.txt" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="does not exist"):
        model_files(str(tmp_path / "absent"))


def test_model_dir_with_hf_config_name(model_dir):
    shutil.move(str(model_dir / "bert_config.json"), str(model_dir / "config.json"))
    config, checkpoint, vocab = model_files(str(model_dir))
    assert config.endswith("config.json") and checkpoint.endswith("bert_model.ckpt")


def test_bundled_model_fills_everyday_blanks():
    """The bundled GAU-alpha (trained, not random): for most of the everyday sentences of
    benchmarks/fill_mask_probes.tsv the obvious answer is among its top 5, and the README's
    first command gets a sensible answer."""
    quality = load_benchmark("mlm_quality")
    model, tokenizer = load_pretrained(with_mlm=True)
    probes = quality.read_probes(quality.PROBES)
    results = quality.probe_hits(model, tokenizer, probes)
    assert len(probes) >= 20
    missed = [f"{sentence} -> {' '.join(top)}" for sentence, _, top, hit in results if not hit]
    assert 1 - len(missed) / len(probes) >= 0.5, missed
    top = [token for token, _ in fill_mask(model, tokenizer, "今天天气很[MASK]。", 5)[0]]
    assert "好" in top, top


def test_bundled_model_reads_the_second_text_of_a_pair(shared_data):
    """Every sentence-pair task gives its second text segment id 1. The bundled model reads
    held-out text given as a pair (second half segment 1) about as well as one text: a model
    whose segment-1 embedding was never trained (every pretraining segment id 0) got 0.109 on
    the second halves against 0.320 on whole documents."""
    quality = load_benchmark("mlm_quality")
    model, tokenizer = load_pretrained(with_mlm="linear")
    with open(shared_data / "corpus" / "zh_corpus.txt", encoding="utf-8") as f:
        held_out = [line.strip() for line in f.read().splitlines()[49::50]]   # the pretraining held-out split
    texts = [text for text in held_out if len(text) >= 40][:300]
    single = quality.random_char_accuracy(model, tokenizer, texts)
    pair = quality.random_char_accuracy(model, tokenizer, texts, pair=True)
    assert single["masked"] > 1000 and pair["second_masked"] > 500
    assert pair["second_accuracy"] >= 0.8 * single["accuracy"], (pair, single)
