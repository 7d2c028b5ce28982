"""Loading the bundled (or any released) model with its tokenizer in one call: ``load_pretrained``.

Model directories and presets live in ``gau_keras.models.presets``; their names stay
importable from here.
"""

import os

from gau_keras.models.builder import build_transformer_model
from gau_keras.models.config import read_json
from gau_keras.models.huggingface import hf_model_name, is_hf_directory
from gau_keras.models.presets import (
    BUNDLED_DIR,
    REQUIRED_TOKENS,
    check_model_dir,
    check_vocab,
    default_model_dir,
    model_files,
    vocab_file,
)
from gau_keras.tokenizers import Tokenizer

__all__ = [
    "BUNDLED_DIR",
    "REQUIRED_TOKENS",
    "check_model_dir",
    "default_model_dir",
    "model_files",
    "load_pretrained",
    "model_name",
]


def model_name(model_dir=None, model=None):
    """The model ``load_pretrained`` builds: ``model`` when named, else a Hugging Face directory's
    (its config.json's ``model_type``), else 'gau_alpha' (the bundled model's)."""
    if model is not None:
        return model
    if model_dir is not None and is_hf_directory(model_dir):
        where = os.path.join(model_dir, "config.json")
        return hf_model_name(read_json(where), where)
    return "gau_alpha"


def _lower_case(model_dir):
    """Whether a Hugging Face directory's tokenizer lower-cases: tokenizer_config.json's
    ``do_lower_case``, else tokenizer.json's normalizer's ``lowercase``, else True (bert4keras's)."""
    for name, keys in (("tokenizer_config.json", ("do_lower_case",)), ("tokenizer.json", ("normalizer", "lowercase"))):
        path = os.path.join(model_dir, name)
        value = read_json(path) if os.path.isfile(path) else {}
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, bool):
            return value
    return True


def load_pretrained(model_dir=None, model=None, **kwargs):
    """Builds the model of ``model_dir`` (default: the bundled one) and its tokenizer.

    Returns ``(keras_model, tokenizer)``; ``kwargs`` go to ``build_transformer_model``.
    The directory is checked first (``check_model_dir``; [MASK] is required
    with an MLM head). A Hugging Face model directory (config.json, model.safetensors or
    pytorch_model.bin, vocab.txt or a WordPiece tokenizer.json) is read as one; ``model``
    (``model_name``): its config.json's model unless named, 'gau_alpha' for a released directory.
    """
    required = REQUIRED_TOKENS + (("[MASK]",) if kwargs.get("with_mlm") else ())
    model_dir = model_dir or default_model_dir()
    model = model_name(model_dir, model)
    if is_hf_directory(model_dir):
        config = os.path.join(model_dir, "config.json")
        vocab = vocab_file(model_dir)
        token_dict = check_vocab(vocab, read_json(config).get("vocab_size"), config, required)
        tokenizer = Tokenizer(token_dict, do_lower_case=_lower_case(model_dir))
        return build_transformer_model(checkpoint_path=model_dir, model=model, **kwargs), tokenizer
    config, checkpoint, vocab = check_model_dir(model_dir, required)
    tokenizer = Tokenizer(vocab, do_lower_case=True)
    return build_transformer_model(config, checkpoint, model=model, **kwargs), tokenizer
