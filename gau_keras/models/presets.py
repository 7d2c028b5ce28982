"""Where a model comes from: model directories in the released layout (bert_config.json,
bert_model.ckpt.* (TF1 checkpoint) and vocab.txt), their checks, and the presets of the package
(``PRESETS``: name -> a function giving its model directory; ``Backbone.from_preset`` reads them).
"""

import os

from gau_keras import checkpoints
from gau_keras.models.config import read_config
from gau_keras.tokenizers import load_vocab

#: the small GAU-alpha shipped inside the package (gau_keras/pretrained/gau_alpha_tiny, see its TRAINING.md)
BUNDLED_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pretrained", "gau_alpha_tiny")


def default_model_dir():
    """The bundled model directory; an error if the package ships none."""
    if not os.path.isfile(os.path.join(BUNDLED_DIR, "bert_config.json")):
        raise FileNotFoundError(f"no bundled model at {BUNDLED_DIR}; pass --model-dir DIR")
    return BUNDLED_DIR


#: the files a model directory's vocabulary is read from, in order of preference
VOCAB_FILES = ("vocab.txt", "tokenizer.json")


def vocab_file(model_dir, vocab_names=VOCAB_FILES):
    """The first of ``vocab_names`` that ``model_dir`` holds; FileNotFoundError naming them else."""
    vocab = next((os.path.join(model_dir, n) for n in vocab_names if os.path.isfile(os.path.join(model_dir, n))), None)
    if vocab is None:
        raise FileNotFoundError(f"{model_dir!r} has no {' nor '.join(vocab_names)}")
    return vocab


def model_files(model_dir, vocab_names=VOCAB_FILES):
    """(config_path, checkpoint_prefix, vocab_path) of a model directory; the vocabulary is the
    first of ``vocab_names`` the folder holds (a Hugging Face WordPiece ``tokenizer.json`` after
    vocab.txt; a SentencePiece model, ``spiece.model``, where the caller reads one).

    Raises FileNotFoundError naming the first missing file (ValueError when
    ``model_dir`` is a file).
    """
    model_dir = os.fspath(model_dir)
    if os.path.isfile(model_dir):
        raise ValueError(
            f"--model-dir {model_dir!r} is a file, not a model directory (bert_config.json, "
            f"bert_model.ckpt.*, vocab.txt)"
        )
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"model directory {model_dir!r} does not exist")
    config = _config_file(model_dir)
    vocab = vocab_file(model_dir, vocab_names)
    prefix = os.path.join(model_dir, "bert_model.ckpt")
    if not os.path.isfile(prefix + ".index"):
        prefix = checkpoints.resolve_checkpoint(model_dir)
    return config, prefix, vocab


def _config_file(model_dir):
    """bert_config.json, config.json, or the one other ``*config*.json`` of the folder (albert_zh's
    ``albert_config.json``, ELECTRA's ``*_discriminator_config.json``); an error naming the folder
    when there is none, and the candidates when there are several."""
    for name in ("bert_config.json", "config.json"):
        if os.path.isfile(os.path.join(model_dir, name)):
            return os.path.join(model_dir, name)
    candidates = sorted(name for name in os.listdir(model_dir) if name.endswith(".json") and "config" in name)
    if len(candidates) == 1:
        return os.path.join(model_dir, candidates[0])
    if not candidates:
        raise FileNotFoundError(f"{model_dir!r} has no bert_config.json (nor config.json, nor another *config*.json)")
    raise ValueError(
        f"{model_dir!r} has several config files {candidates} and no bert_config.json: "
        f"rename the one of the model to bert_config.json"
    )


#: the special tokens every use of a model directory needs ([MASK] too for an MLM head)
REQUIRED_TOKENS = ("[UNK]", "[CLS]", "[SEP]")


def check_vocab(vocab_path, vocab_size, config_path, required_tokens=REQUIRED_TOKENS):
    """The ``{token: id}`` of ``vocab_path`` (vocab.txt or a WordPiece tokenizer.json), checked to
    hold ``vocab_size`` tokens (``config_path``'s, None: unchecked) and ``required_tokens``."""
    token_dict = load_vocab(vocab_path)
    if vocab_size is not None and vocab_size != len(token_dict):
        raise ValueError(
            f"{vocab_path} has {len(token_dict)} tokens but {config_path} says vocab_size={vocab_size}: "
            f"the vocab does not belong to this model"
        )
    missing = [token for token in required_tokens if token not in token_dict]
    if missing:
        raise ValueError(f"{vocab_path} lacks the special token(s) {missing}, which the tokenizer needs")
    return token_dict


def check_model_dir(model_dir, required_tokens=REQUIRED_TOKENS):
    """``model_files`` plus the checks that catch a mismatched directory early.

    The config must be valid (``gau_keras.models.config``), the vocab must
    hold ``vocab_size`` tokens (as many rows as the checkpoint's embeddings)
    and the special tokens, and the checkpoint must be readable. Every error
    names the file at fault. Returns (config_path, checkpoint_prefix, vocab_path).
    """
    config_path, prefix, vocab_path = model_files(model_dir)
    config = read_config(config_path)
    size = config.get("vocab_size")
    check_vocab(vocab_path, size, config_path, required_tokens)
    reader = checkpoints.CheckpointReader(prefix)
    rows = reader.shapes.get("bert/embeddings/word_embeddings")
    if rows is not None and size is not None and rows[0] != size:
        raise ValueError(
            f"checkpoint {prefix!r} has {rows[0]} word-embedding rows but {config_path} says vocab_size={size}"
        )
    return config_path, prefix, vocab_path


#: preset name -> (the model it is registered for, a function giving its model directory)
PRESETS = {"gau_alpha_tiny": ("gau_alpha", default_model_dir)}


def presets_of(model):
    """``{preset name: directory function}`` of the presets of registered model name ``model``."""
    return {name: directory for name, (owner, directory) in PRESETS.items() if owner == model}
