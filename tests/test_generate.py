"""``gau-keras generate``: a tiny GPT2 model directory written here, greedy streaming, beam
search and sampling, and the refusals (the bundled MLM-only model, an encoder without
``--application``, a prompt past the position table, bad options)."""

import json

import keras
import numpy as np
import pytest

from gau_keras import build_transformer_model
from gau_keras.__main__ import main

CHARACTERS = "今天气很好我们去公园散步明是个日子的了在有人"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARACTERS]
CONFIG = {
    "vocab_size": len(VOCAB),
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "max_position_embeddings": 24,
}


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """bert_config.json, vocab.txt and a checkpoint of a tiny GPT2 with seeded weights."""
    directory = tmp_path_factory.mktemp("gpt2")
    (directory / "bert_config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    keras.utils.set_random_seed(3)
    transformer = build_transformer_model(directory / "bert_config.json", model="gpt2", return_keras_model=False)
    rng = np.random.default_rng(3)
    for weight in transformer.model.weights:
        weight.assign(weight.numpy() + rng.normal(0, 0.3, weight.shape).astype("float32"))
    transformer.save_weights_as_checkpoint(str(directory / "bert_model.ckpt"))
    return directory


def generate(capsys, *argv):
    status = main(["generate", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_greedy_streams_what_beam_search_of_one_finds(gpt2_dir, capsys):
    common = ["--model-dir", str(gpt2_dir), "--model", "gpt2", "今天", "--max-new-tokens", "9"]
    status, greedy, err = generate(capsys, *common)
    assert status == 0, err
    status, beam, err = generate(capsys, *common, "--strategy", "beam", "--num-beams", "1")
    assert status == 0, err
    assert greedy == beam and greedy.startswith("今天") and len(greedy.strip()) > len("今天")


def test_sampling_repeats_with_a_seed(gpt2_dir, capsys):
    argv = ["--model-dir", str(gpt2_dir), "--model", "gpt2", "我们", "--strategy", "sample", "--top-k", "5"]
    first = generate(capsys, *argv, "--top-p", "0.9", "--seed", "11", "--max-new-tokens", "6")
    again = generate(capsys, *argv, "--top-p", "0.9", "--seed", "11", "--max-new-tokens", "6")
    assert first[0] == 0 and first == again


@pytest.mark.parametrize(
    "argv, message",
    [
        (["今天"], "the bundled GAU-alpha was trained with masked-LM only"),
        (["--model-dir", "{dir}", "--model", "roformer_v2", "今天"], "--application lm or --application unilm"),
        (["--model-dir", "{dir}", "--model", "gpt2", "今" * 30], "has 31 tokens; --model gpt2 has 24 positions"),
        (["--model-dir", "{dir}", "--model", "gpt2", "今天", "--top-k", "3"], "--top-k and --top-p take --strategy"),
    ],
)
def test_refusals_say_why(gpt2_dir, capsys, argv, message):
    status, out, err = generate(capsys, *[a.format(dir=gpt2_dir) for a in argv])
    assert status == 2 and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "option, value", [("--top-p", "1.5"), ("--top-p", "0"), ("--top-k", "0"), ("--max-new-tokens", "0")]
)
def test_option_values_are_checked(gpt2_dir, capsys, option, value):
    with pytest.raises(SystemExit) as info:
        main(["generate", "--model-dir", str(gpt2_dir), "今天", option, value])
    assert info.value.code == 2 and option in capsys.readouterr().err


@pytest.fixture(scope="module")
def mt5_dir(tmp_path_factory):
    """bert_config.json, spiece.model (trained here, T5's ids) and a checkpoint of a tiny mT5."""
    spm = pytest.importorskip("sentencepiece", reason="sentencepiece (requirements.txt) is not installed")
    directory = tmp_path_factory.mktemp("mt5")
    lines = [CHARACTERS[i:] + CHARACTERS[:i] for i in range(len(CHARACTERS))]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(directory / "spiece"),
        vocab_size=40,
        hard_vocab_limit=False,
        model_type="char",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    size = spm.SentencePieceProcessor(model_file=str(directory / "spiece.model")).get_piece_size()
    config = {**CONFIG, "vocab_size": size, "hidden_act": ["gelu", "linear"], "attention_head_size": 16}
    (directory / "bert_config.json").write_text(json.dumps(config), encoding="utf-8")
    keras.utils.set_random_seed(5)
    transformer = build_transformer_model(directory / "bert_config.json", model="mt5.1.1", return_keras_model=False)
    rng = np.random.default_rng(5)
    for weight in transformer.model.weights:
        weight.assign(weight.numpy() + rng.normal(0, 0.3, weight.shape).astype("float32"))
    transformer.save_weights_as_checkpoint(str(directory / "bert_model.ckpt"))
    return directory


def test_a_t5_directory_decodes_from_its_encoder(mt5_dir, capsys):
    common = ["--model-dir", str(mt5_dir), "--model", "mt5.1.1", "今天天气很好", "--max-new-tokens", "6"]
    status, greedy, err = generate(capsys, *common)
    assert status == 0, err
    status, beam, err = generate(capsys, *common, "--strategy", "beam", "--num-beams", "1")
    assert status == 0, err
    assert greedy == beam and greedy.startswith("今天天气很好\n  -> ")
    status, out, err = generate(capsys, "--model-dir", str(mt5_dir), "--model", "mt5.1.1_encoder", "今天")
    assert status == 2 and "one half of T5" in err
