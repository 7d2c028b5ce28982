"""How close our models read from Hugging Face files come to the outputs transformers computed.

    python3 benchmarks/hf_parity.py [--archs bert,gpt2,...]

For each tiny random model of tests/fixtures/hf/ (written, with transformers' outputs on fixed ids,
by tests/fixtures/make_hf_fixtures.py) and each way in: its ``model.safetensors``, its
``pytorch_model.bin`` (torch.load where torch is installed, else gau_keras's restricted unpickler:
the table says which) and our ``hf_export`` of the model read back, prints the largest
|ours - theirs| relative to the largest |theirs|, over the real tokens, of the last hidden states
and of the head's logits (the larger of the two): MLM logits, ELECTRA's discriminator logits,
GPT2's and T5's log-probabilities (centred, as softmax leaves them). Not timed.
"""

import argparse
import importlib.util
import pathlib
import shutil
import sys
import tempfile

import keras
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from gau_keras.models.builder import build_transformer_model  # noqa: E402
from gau_keras.models.huggingface import hf_export  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hf"
#: the head whose logits transformers' reference holds (the MLM head's where not named)
HEADS = {"electra": {"with_discriminator": "linear"}, "gpt2": {}, "t5": {}, "mt5": {}}
WAYS = ("model.safetensors", "pytorch_model.bin", "our export")


def _centred(logits):
    return logits - logits.mean(-1, keepdims=True)


def _error(ours, theirs, real):
    return float(np.abs(np.asarray(ours) - theirs)[real].max() / np.abs(theirs[real]).max())


def errors(arch, directory):
    """The larger relative error of the hidden states and the logits of the model of ``directory``.

    Args:
        arch: the fixture (tests/fixtures/hf/<arch>) whose reference outputs it is compared with.
        directory: a Hugging Face directory of that fixture's model.
    Returns:
        a float.
    """
    reference = np.load(FIXTURES / arch / "reference.npz")
    ids, real = reference["token_ids"], reference["token_ids"] != 0
    model = build_transformer_model(checkpoint_path=directory, model=None, **HEADS.get(arch, {"with_mlm": "linear"}))
    if arch in ("t5", "mt5"):
        encoder = keras.Model(model.inputs[0], model.get_layer("Encoder-Output-Norm").output)
        hidden = _error(encoder.predict(ids, verbose=0), reference["encoder_hidden"], real)
        logits = _centred(np.log(model.predict([ids, reference["decoder_ids"]], verbose=0)))
        every = np.ones(reference["decoder_ids"].shape, bool)
        return max(hidden, _error(logits, _centred(reference["logits"]), every))
    if arch == "gpt2":
        norm = keras.Model(model.inputs, model.get_layer("Output-Norm").output)
        hidden = _error(norm.predict([ids], verbose=0), reference["hidden"], real)
        logits = _centred(np.log(model.predict([ids], verbose=0)))
        return max(hidden, _error(logits, _centred(reference["logits"]), real))
    inputs = [ids, reference["segment_ids"]]
    encoder = build_transformer_model(checkpoint_path=directory, model=None)
    hidden = _error(encoder.predict(inputs, verbose=0), reference["hidden"], real)
    logits = model.predict(inputs, verbose=0).reshape(reference["logits"].shape)  # ELECTRA's [B, L, 1]
    return max(hidden, _error(logits, reference["logits"], real))


def row(arch, scratch):
    """The errors of ``arch`` read each of the ``WAYS``, in a folder of its own under ``scratch``."""
    found = []
    for way in WAYS[:2]:
        directory = scratch / f"{arch}-{way}"
        directory.mkdir()
        for name in ("config.json", "vocab.txt", way):
            shutil.copy(FIXTURES / arch / name, directory)
        found.append(errors(arch, directory))
    heads = HEADS.get(arch, {"with_mlm": "linear"})
    model = build_transformer_model(checkpoint_path=FIXTURES / arch, model=None, return_keras_model=False, **heads)
    hf_export(model, scratch / f"{arch}-export")
    found.append(errors(arch, scratch / f"{arch}-export"))
    return found


def main(argv=None):
    archs = sorted(path.name for path in FIXTURES.iterdir() if (path / "reference.npz").is_file())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", default=",".join(archs), help=f"comma-separated, of {', '.join(archs)}")
    args = parser.parse_args(argv)
    chosen = args.archs.split(",")
    unknown = sorted(set(chosen) - set(archs))
    if unknown:
        parser.error(f"--archs: {unknown} have no fixture; there are {archs}")
    reader = "torch.load" if importlib.util.find_spec("torch") else "restricted unpickler, no torch"
    print(f"| architecture | {WAYS[0]} | {WAYS[1]} ({reader}) | {WAYS[2]} read back |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for arch in chosen:
            print(f"| {arch} | " + " | ".join(f"{e:.1e}" for e in row(arch, pathlib.Path(scratch))) + " |")


if __name__ == "__main__":
    main()
