"""Model directories in the released layout: bert_config.json,
bert_model.ckpt.* (TF1 checkpoint) and vocab.txt."""
import os

from gau_keras import checkpoints

#: the small GAU-alpha shipped inside the package (see its TRAINING.md)
BUNDLED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained", "gau_alpha_tiny")


def default_model_dir():
    """The bundled model directory; an error if the package ships none."""
    if not os.path.isfile(os.path.join(BUNDLED_DIR, "bert_config.json")):
        raise FileNotFoundError(f"no bundled model at {BUNDLED_DIR}; pass --model-dir DIR")
    return BUNDLED_DIR


def model_files(model_dir):
    """(config_path, checkpoint_prefix, vocab_path) of a model directory.

    Raises FileNotFoundError naming the first missing file.
    """
    model_dir = os.fspath(model_dir)
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"model directory {model_dir!r} does not exist")
    config = os.path.join(model_dir, "bert_config.json")
    if not os.path.isfile(config):
        alternative = os.path.join(model_dir, "config.json")
        if not os.path.isfile(alternative):
            raise FileNotFoundError(f"{model_dir!r} has no bert_config.json (nor config.json)")
        config = alternative
    vocab = os.path.join(model_dir, "vocab.txt")
    if not os.path.isfile(vocab):
        raise FileNotFoundError(f"{model_dir!r} has no vocab.txt")
    prefix = os.path.join(model_dir, "bert_model.ckpt")
    if not os.path.isfile(prefix + ".index"):
        prefix = checkpoints.resolve_checkpoint(model_dir)
    return config, prefix, vocab


def load_pretrained(model_dir=None, model="gau_alpha", **kwargs):
    """Builds the model of ``model_dir`` (default: the bundled one) and its tokenizer.

    Returns ``(keras_model, tokenizer)``; ``kwargs`` go to ``build_transformer_model``.
    """
    from gau_keras.models.builder import build_transformer_model
    from gau_keras.tokenizers import Tokenizer

    config, checkpoint, vocab = model_files(model_dir or default_model_dir())
    tokenizer = Tokenizer(vocab, do_lower_case=True)
    return build_transformer_model(config, checkpoint, model=model, **kwargs), tokenizer
