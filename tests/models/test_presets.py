"""Opening a model directory: every mismatch is an error naming the file (and key),
through load_pretrained, the fill-mask CLI and the fine-tuning runner."""

import json

import numpy as np
import pytest

from gau_keras import __main__ as cli
from gau_keras import build_transformer_model
from gau_keras.checkpoints import CheckpointError
from gau_keras.fill_mask import fill_mask
from gau_keras.models.config import ConfigError
from gau_keras.pretrained import check_model_dir, load_pretrained
from gau_keras.tokenizers import Tokenizer
from tests.model_utils import TINY_GAU, random_checkpoint

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CHARS = "今天气很好。我们去公园散步"


def _vocab(directory, size=60, drop=()):
    tokens = [t for t in SPECIALS if t not in drop] + list(CHARS)
    tokens += [f"[unused{i}]" for i in range(size - len(tokens))]
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")


@pytest.fixture
def model_dir(tmp_path):
    _vocab(tmp_path)
    random_checkpoint(str(tmp_path))
    return tmp_path


def _cli_error(model_dir, capsys, *extra):
    assert cli.main(["fill-mask", "--model-dir", str(model_dir), *extra, "今天[MASK]"]) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("size", [50, 70])
def test_vocab_size_must_match_the_config(model_dir, capsys, size):
    _vocab(model_dir, size)
    with pytest.raises(ValueError, match=rf"vocab\.txt has {size} tokens but .*bert_config\.json says vocab_size=60"):
        load_pretrained(str(model_dir))
    assert "vocab_size=60" in _cli_error(model_dir, capsys)


@pytest.mark.parametrize("token", ["[MASK]", "[CLS]", "[SEP]", "[UNK]"])
def test_special_tokens_are_required(model_dir, capsys, token):
    _vocab(model_dir, drop=(token,))
    err = _cli_error(model_dir, capsys)
    assert "vocab.txt lacks the special token(s)" in err and token in err


def test_fill_mask_refuses_a_vocab_without_mask(model_dir):
    model, _ = load_pretrained(str(model_dir), with_mlm=True)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + list(CHARS))}
    tokenizer = Tokenizer(vocab, do_lower_case=True)
    with pytest.raises(ValueError, match=r"no \[MASK\] token"):
        fill_mask(model, tokenizer, "今天[MASK]")


def test_truncated_checkpoint_names_the_file(model_dir, capsys):
    data = model_dir / "bert_model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:100])
    err = _cli_error(model_dir, capsys)
    assert "bert_model.ckpt.data-00000-of-00001" in err and "truncated" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("hidden_size", -1, "hidden_size must be an integer >= 1, got -1"),
        ("num_hidden_layers", 0, "num_hidden_layers must be an integer >= 1, got 0"),
        ("hidden_dropout_prob", 1.5, "dropout_rate must be a number in \\[0, 1\\), got 1.5"),
        ("intermediate_size", "24", "intermediate_size must be an integer >= 1, got '24'"),
        ("hidden_act", "swoosh", "hidden_act='swoosh' is not a Keras activation"),
    ],
)
def test_config_values_are_validated_naming_key_and_file(model_dir, capsys, key, value, message):
    config = json.loads((model_dir / "bert_config.json").read_text())
    config[key] = value
    (model_dir / "bert_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=message) as error:
        check_model_dir(str(model_dir))
    assert "bert_config.json" in str(error.value)
    assert message.replace("\\", "") in _cli_error(model_dir, capsys)


def test_keep_tokens_out_of_range(model_dir):
    with pytest.raises(CheckpointError, match=r"keep_tokens: id\(s\) \[60, 99\] are not rows of .*60 rows"):
        build_transformer_model(
            str(model_dir / "bert_config.json"),
            str(model_dir / "bert_model.ckpt"),
            keep_tokens=[0, 1, 60, 99],
            model="gau_alpha",
        )
    model = build_transformer_model(
        str(model_dir / "bert_config.json"),
        str(model_dir / "bert_model.ckpt"),
        keep_tokens=[0, 2, 3, 5],
        model="gau_alpha",
    )
    assert model.get_layer("Embedding-Token").embeddings.shape == (4, TINY_GAU["hidden_size"])


@pytest.mark.parametrize("top_k", ["0", "-3", "two"])
def test_top_k_must_be_positive(model_dir, capsys, top_k):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["fill-mask", "--model-dir", str(model_dir), "--top-k", top_k, "今天[MASK]"])
    assert exit_.value.code == 2 and "--top-k" in capsys.readouterr().err


def test_intact_directory_passes(model_dir):
    config, prefix, vocab = check_model_dir(str(model_dir))
    model, tokenizer = load_pretrained(str(model_dir), with_mlm=True)
    ids, segments = tokenizer.encode("今天天气很好")
    assert np.isfinite(model.predict([np.array([ids]), np.array([segments])], verbose=0)).all()
