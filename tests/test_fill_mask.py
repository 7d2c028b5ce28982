"""The fill-mask entry point on a tiny random model directory."""

import pathlib
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
    tokenizer = Tokenizer(str(model_dir / "vocab.txt"), do_lower_case=True)
    ids, segments, positions = encode_with_masks(tokenizer, "今天[MASK]气很[MASK]。")
    tokens = tokenizer.ids_to_tokens(ids)
    assert tokens == ["[CLS]", "今", "天", "[MASK]", "气", "很", "[MASK]", "。", "[SEP]"]
    assert positions == [3, 6] and segments == [0] * 9
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        encode_with_masks(tokenizer, "今天天气很好")


def test_fill_mask_returns_sorted_probabilities(model_dir):
    model, tokenizer = load_pretrained(str(model_dir), with_mlm=True)
    (candidates,) = fill_mask(model, tokenizer, "今天天气很[MASK]。", top_k=len(CHARS) + 3)
    probs = [p for _, p in candidates]
    assert probs == sorted(probs, reverse=True)
    # never a special token ([PAD] ... [unused54] are 47 of the 60 entries): only the vocab's characters
    assert sorted(token for token, _ in candidates) == sorted(set(CHARS))
    ids, segments, positions = encode_with_masks(tokenizer, "今天天气很[MASK]。")
    full = model.predict([np.array([ids]), np.array([segments])], verbose=0)[0, positions[0]]
    text_ids = [tokenizer.token_to_id(ch) for ch in set(CHARS)]
    best = max(text_ids, key=lambda i: full[i])
    assert candidates[0] == (tokenizer.id_to_token(best), pytest.approx(float(full[best]), rel=1e-5))


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
    readme = tmp_path / "README.md"
    readme.write_text("# notes\n")
    assert cli.main(["fill-mask", "--model-dir", str(readme), "今[MASK]"]) == 2
    assert capsys.readouterr().err == (
        f"error: --model-dir {str(readme)!r} is a file, not a model directory "
        f"(bert_config.json, bert_model.ckpt.*, vocab.txt)\n"
    )


def test_the_command_line_quiets_tensorflows_start_up_log(tmp_path):
    import os
    import subprocess
    import sys

    from gau_keras.cli_env import is_command_line

    assert is_command_line(["/usr/bin/gau-keras"], ["python", "/usr/bin/gau-keras"])
    assert is_command_line(["-m"], ["python", "-X", "dev", "-m", "gau_keras", "fill-mask"])
    assert not is_command_line(["train.py"], ["python", "train.py", "-m", "x"])
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    code = (
        "import os, sys; sys.argv = ['gau-keras']; import gau_keras, tensorflow as tf; tf.constant(1) + 1;"
        "print(os.environ['TF_CPP_MIN_LOG_LEVEL'])"
    )
    for given, expected in ((None, "3"), ("0", "0")):
        run_env = env if given is None else {**env, "TF_CPP_MIN_LOG_LEVEL": given}
        result = subprocess.run(
            [sys.executable, "-c", code], env=run_env, capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert result.returncode == 0 and result.stdout.split() == [expected], result.stderr[-2000:]
        if given is None:  # TensorFlow's start-up notices (before the fix: the AVX line, cuInit errors ...)
            assert result.stderr == "", result.stderr


def test_model_dir_with_hf_config_name(model_dir):
    shutil.move(str(model_dir / "bert_config.json"), str(model_dir / "config.json"))
    config, checkpoint, vocab = model_files(str(model_dir))
    assert config.endswith("config.json") and checkpoint.endswith("bert_model.ckpt")


@pytest.mark.both_backends  # fill-mask in the JAX pass (tests/conftest.py)
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
        held_out = [line.strip() for line in f.read().splitlines()[49::50]]  # the pretraining held-out split
    texts = [text for text in held_out if len(text) >= 40][:150]
    single = quality.random_char_accuracy(model, tokenizer, texts)
    pair = quality.random_char_accuracy(model, tokenizer, texts, pair=True)
    assert single["masked"] > 1000 and pair["second_masked"] > 500
    assert pair["second_accuracy"] >= 0.8 * single["accuracy"], (pair, single)


HF_BERT = pathlib.Path(__file__).resolve().parent / "fixtures" / "hf" / "bert"


def test_a_hugging_face_directory_with_only_tokenizer_json_fills_masks(tmp_path, capsys):
    """config.json + model.safetensors + tokenizer.json: the model from config.json (no --model),
    the vocabulary from the WordPiece tokenizer.json; the same predictions as with vocab.txt."""
    for name, files in (("json", ("tokenizer.json",)), ("txt", ("vocab.txt",))):
        (tmp_path / name).mkdir()
        for file in ("config.json", "model.safetensors", *files):
            shutil.copy(HF_BERT / file, tmp_path / name)
    model, tokenizer = load_pretrained(str(tmp_path / "json"), with_mlm=True)
    assert type(model).__name__ == "BertBackbone" and tokenizer.token_to_id("[MASK]") == 4
    printed = []
    for name in ("json", "txt"):
        assert cli.main(["fill-mask", "--model-dir", str(tmp_path / name), "--top-k", "2", "一[MASK]丁"]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] and "[MASK] #1:" in printed[0]
