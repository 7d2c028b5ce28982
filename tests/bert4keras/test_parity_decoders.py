"""gau_keras's decoder-only language models (gpt, gpt2, gpt2_ml) vs the ORIGINAL bert4keras 0.11.5.

The method of test_parity_encoders.py (whose cases, batch, snippet prelude and helpers this
module reuses), on the decoders: one bert4keras subprocess builds every forward case from a
tiny config, moves each weight off its initial value by seeded noise, writes its checkpoint
with its own ``save_weights_as_checkpoint`` and returns the variables, the LM probabilities
(or logits, with ``final_activation='linear'``), the input of ``LM-Activation`` (the logits),
the last block's output and the layer names on the fixed batch of real tokens (padded rows,
a full row); we load those variables and compare. Reverse: our ``save_weights_as_checkpoint``
of seeded weights, which bert4keras loads (a second subprocess) and runs on the same batch.
The results of both subprocesses are cached for the JAX pass (tests/conftest.py).

Tolerances: probabilities and hidden states 1e-5 absolute; logits 1e-4 absolute, or 1e-4
relative to the largest logit. ``-s`` prints the max |diff| of each case.
"""

import json

import numpy as np
import pytest

from tests.bert4keras.test_parity_encoders import (
    FORWARD_LOOP,
    REVERSE_LOOP,
    SEED,
    VOCAB_STRIDE,
    VOCAB_WIDE,
    Case,
    _decode,
    _deterministic_weights,
    _snippet,
    _split,
    batch_inputs,
    model_inputs,
    our_build,
    our_checkpoint,
)
from tests.reference.harness import run_bert4keras_code

pytestmark = [pytest.mark.slow, pytest.mark.both_backends]

PROBS_ATOL, HIDDEN_ATOL, LOGITS_TOL = 1e-5, 1e-5, 1e-4
TOKENS = ("token_ids",)
#: the layer whose output is the hidden states the LM head reads (before GPT2's Output-Norm)
LAST_BLOCK = {"gpt": "FeedForward-Norm", "gpt2": "FeedForward-Add", "gpt2_ml": "FeedForward-Norm-1"}

FORWARD = [
    Case("decoders", "default", "gpt"),
    Case("decoders", "logits", "gpt", {"final_activation": "linear"}),
    Case("decoders", "segment_vocab_size_0", "gpt", {"segment_vocab_size": 0}, feeds=TOKENS),
    Case(
        "decoders",
        "custom_position_ids",
        "gpt",
        {"custom_position_ids": True},
        feeds=("token_ids", "segment_ids", "position_ids"),
    ),
    # application='lm' is left out: bert4keras 0.11.5 cannot build it for its GPTs ("Cannot create a
    # consistent method resolution order (MRO) for bases LM_Mask, GPT"); here it builds the same model
    Case("decoders", "default", "gpt2", feeds=TOKENS),
    Case("decoders", "logits", "gpt2", {"final_activation": "linear"}, feeds=TOKENS),
    Case("decoders", "default", "gpt2_ml", feeds=TOKENS),
    Case("decoders", "logits", "gpt2_ml", {"final_activation": "linear"}, feeds=TOKENS),
]
REVERSE = [
    Case("reverse", "default", "gpt"),
    Case("reverse", "default", "gpt2", feeds=TOKENS),
    Case("reverse", "default", "gpt2_ml", feeds=TOKENS),
]

#: replaces the prelude's BERT-specific ``record``: the LM head's output and input, the last block's output
DECODER_RECORD = r"""
LAST_BLOCK = %r


def record(key, case, transformer):
    model = transformer.model
    last = "Transformer-%%d-%%s" %% (transformer.num_hidden_layers - 1, LAST_BLOCK[case["model"]])
    fetches = [model.output, transformer.layers[last].output, transformer.layers["LM-Activation"].input]
    values = K.function(model.inputs, fetches)([inputs[name].astype("float32") for name in case["feeds"]])
    for name, value in zip(["out0", "hidden", "logits"], values):
        if value.ndim == 3 and value.shape[-1] >= %d:
            value = value[..., ::%d]
        outputs["%%s|%%s" %% (key, name)] = value
    outputs[key + "|layers"] = np.array([layer.name for layer in model.layers])
    outputs[key + "|inputs"] = np.array(model.input_names)
""" % (LAST_BLOCK, VOCAB_WIDE, VOCAB_STRIDE)


def _run(cases, loop, arrays):
    return _split(run_bert4keras_code(_snippet(cases, DECODER_RECORD + loop), arrays, graph=True, seed=SEED))


_REFERENCE = {}


def reference():
    """bert4keras's results of every forward case (one subprocess, cached)."""
    if not _REFERENCE:
        _REFERENCE.update(_run(FORWARD, FORWARD_LOOP, {k: v for k, v in batch_inputs().items() if k != "real_text"}))
    return _REFERENCE


def our_outputs(transformer, case):
    """{'out0': the model output, 'hidden': the last block's output, 'logits': LM-Activation's input}."""
    import keras

    net = transformer.model
    last = f"Transformer-{transformer.num_hidden_layers - 1}-{LAST_BLOCK[case.model]}"
    fetches = [net.output, net.get_layer(last).output, net.get_layer("LM-Activation").input]
    values = keras.Model(net.inputs, fetches)(model_inputs(case), training=False)
    values = [np.asarray(keras.ops.convert_to_numpy(v)) for v in values]
    return {
        name: v[..., ::VOCAB_STRIDE] if v.shape[-1] >= VOCAB_WIDE else v
        for name, v in zip(("out0", "hidden", "logits"), values)
    }


def compare(case, ours, ref, direction):
    """Max |diff| per output; the problems (none when within tolerance)."""
    linear = case.options.get("final_activation") == "linear"
    problems, diffs = [], {}
    for item in ("out0", "hidden", "logits"):
        mine, expected = ours[item].astype(np.float64), ref[item]
        if mine.shape != expected.shape:
            problems.append(f"{item}: shape {mine.shape}, bert4keras {expected.shape}")
            continue
        diff = float(np.abs(mine - expected).max())
        diffs[item] = diff
        if item == "logits" or (item == "out0" and linear):
            ok = diff <= LOGITS_TOL or diff <= LOGITS_TOL * float(np.abs(expected).max())
        else:
            ok = diff <= (PROBS_ATOL if item == "out0" else HIDDEN_ATOL)
        if not ok:
            problems.append(f"{item}: max|diff| {diff:.3e}")
    print(f"[{direction}] {case.key}: " + ", ".join(f"{k}={v:.2e}" for k, v in diffs.items()))
    return problems


_OURS = {}


def loaded_from_bert4keras(case, tmp_dir):
    """(our transformer with bert4keras's weights, our outputs, bert4keras's results)."""
    if case.key not in _OURS:
        ref = reference()[case.key]
        variables = {_decode(k[4:]): v for k, v in ref.items() if k.startswith("var|")}
        transformer = our_build(case, variables)
        _OURS[case.key] = transformer, our_outputs(transformer, case), ref
    return _OURS[case.key]


@pytest.mark.parametrize("case", FORWARD, ids=[c.key for c in FORWARD])
def test_loads_bert4keras_weights_and_matches_outputs(case, tmp_path):
    _, ours, ref = loaded_from_bert4keras(case, str(tmp_path))
    problems = compare(case, ours, ref, "bert4keras->ours")
    assert not problems, f"{case.key}: " + "; ".join(problems)


@pytest.mark.parametrize("case", FORWARD, ids=[c.key for c in FORWARD])
def test_saves_bert4keras_checkpoint_names_shapes_values(case, tmp_path):
    transformer, _, ref = loaded_from_bert4keras(case, str(tmp_path / "load"))
    ours = our_checkpoint(transformer, str(tmp_path / "ours"))
    expected = dict(line.split(" ", 1) for line in ref["saved"].tolist())
    got = {name: json.dumps(list(value.shape)) for name, value in ours.items()}
    assert got == expected, (
        f"{case.key}: ours {sorted(set(got) - set(expected))}, bert4keras's {sorted(set(expected) - set(got))}"
    )
    for item, value in ref.items():
        if item.startswith("var|"):
            np.testing.assert_allclose(ours[_decode(item[4:])], value, rtol=0, atol=1e-7, err_msg=case.key)


@pytest.mark.parametrize("case", FORWARD, ids=[c.key for c in FORWARD])
def test_layer_and_input_names(case, tmp_path):
    transformer, _, ref = loaded_from_bert4keras(case, str(tmp_path))
    net = transformer.model
    ours, theirs = {layer.name for layer in net.layers}, {str(n) for n in ref["layers"]}
    assert ours == theirs, (
        f"{case.key}: only bert4keras has {sorted(theirs - ours)}, only we have {sorted(ours - theirs)}"
    )
    assert [t.name.split(":")[0] for t in net.inputs] == [str(n) for n in ref["inputs"]]


_REVERSE = {}


def reverse_results(tmp_dir):
    """{case key: (our outputs, bert4keras's on our checkpoint)}: one bert4keras subprocess."""
    if not _REVERSE:
        arrays = {k: v for k, v in batch_inputs().items() if k != "real_text"}
        ours = {}
        for index, case in enumerate(REVERSE):
            transformer = our_build(case)
            _deterministic_weights(transformer, SEED + 2000 + index)
            variables = our_checkpoint(transformer, f"{tmp_dir}/{case.key}")
            ours[case.key] = our_outputs(transformer, case)
            arrays.update({f"{case.key}|var|{name.replace('/', '~')}": v for name, v in variables.items()})
        refs = _run(REVERSE, REVERSE_LOOP, arrays)
        _REVERSE.update({case.key: (ours[case.key], refs[case.key]) for case in REVERSE})
    return _REVERSE


@pytest.mark.parametrize("case", REVERSE, ids=[c.key for c in REVERSE])
def test_bert4keras_loads_our_checkpoint_and_matches_outputs(case, tmp_path_factory):
    ours, ref = reverse_results(str(tmp_path_factory.mktemp("reverse")))[case.key]
    problems = compare(case, ours, ref, "ours->bert4keras")
    assert not problems, f"{case.key} (our checkpoint in bert4keras): " + "; ".join(problems)
