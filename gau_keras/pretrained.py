"""Loading the bundled (or any released) model with its tokenizer in one call: ``load_pretrained``.

Model directories and presets live in ``gau_keras.models.presets``; their names stay
importable from here.
"""

from gau_keras.models.builder import build_transformer_model
from gau_keras.models.presets import (
    BUNDLED_DIR,
    REQUIRED_TOKENS,
    check_model_dir,
    default_model_dir,
    model_files,
)
from gau_keras.tokenizers import Tokenizer

__all__ = ["BUNDLED_DIR", "REQUIRED_TOKENS", "check_model_dir", "default_model_dir", "model_files", "load_pretrained"]


def load_pretrained(model_dir=None, model="gau_alpha", **kwargs):
    """Builds the model of ``model_dir`` (default: the bundled one) and its tokenizer.

    Returns ``(keras_model, tokenizer)``; ``kwargs`` go to ``build_transformer_model``.
    The directory is checked first (``check_model_dir``; [MASK] is required
    with an MLM head).
    """
    required = REQUIRED_TOKENS + (("[MASK]",) if kwargs.get("with_mlm") else ())
    config, checkpoint, vocab = check_model_dir(model_dir or default_model_dir(), required)
    tokenizer = Tokenizer(vocab, do_lower_case=True)
    return build_transformer_model(config, checkpoint, model=model, **kwargs), tokenizer
