"""gau_keras's T5 vs the ORIGINAL bert4keras 0.11.5 (run in a subprocess), versions t5.1.0
(ReLU, tied output) and mt5.1.1 (gated GELU, untied output, rms_norm names).

Method (tests/bert4keras/test_parity_encoders.py's, one bert4keras subprocess per direction,
its results cached for the JAX pass by run_bert4keras_code):
  * forward (bert4keras -> us): bert4keras builds ``build_transformer_model(config, model=version,
    return_keras_model=False)`` from a tiny config, moves every trainable weight off its initial
    value by seeded noise, writes the weights with its own ``save_weights_as_checkpoint`` and
    returns every checkpoint variable, the encoder output, the decoder's scaled hidden states
    (``Decoder-Output-Scale``) and probabilities of the joint model on a padded batch, and the
    layer names of its three keras models. We load the variables and compare; our
    ``save_weights_as_checkpoint`` writes the same names, shapes and values.
  * reverse (us -> bert4keras): we set every weight to seeded values, save with our
    ``save_weights_as_checkpoint``; bert4keras loads that checkpoint and reproduces our outputs.

Tolerances: probabilities 1e-5 absolute, hidden states and log-probabilities (the logits up to
each row's constant) 1e-4 absolute.
"""

import json
import os

import numpy as np
import pytest

from gau_keras import build_transformer_model
from tests.reference.harness import run_bert4keras_code

pytestmark = [pytest.mark.slow, pytest.mark.both_backends]

PROBS_ATOL, HIDDEN_ATOL, LOGITS_ATOL = 1e-5, 1e-4, 1e-4
NOISE = 0.05
SEED = 20240611
VERSIONS = ("t5.1.0", "mt5.1.1")
BASE_CONFIG = {
    "vocab_size": 120,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "attention_head_size": 8,
    "intermediate_size": 48,
    "dropout_rate": 0.1,
}
CONFIGS = {
    "t5.1.0": dict(BASE_CONFIG, hidden_act="relu"),
    "mt5.1.1": dict(BASE_CONFIG, hidden_act=["gelu", "linear"]),
}


def batch():
    """Encoder ids [3, 40] (right-padded, full, left-padded; 40 tokens: distances past T5's
    exact buckets) and decoder ids [3, 9] (0 = T5's start id first, right-padded)."""
    rng = np.random.default_rng(SEED)
    encoder = rng.integers(2, 120, (3, 40)).astype(np.int32)
    encoder[0, 11:] = 0
    encoder[2, :25] = 0
    decoder = rng.integers(2, 120, (3, 9)).astype(np.int32)
    decoder[:, 0] = 0
    decoder[0, 5:] = 0
    decoder[2, 7:] = 0
    return {"encoder_ids": encoder, "decoder_ids": decoder}


PRELUDE = r"""
import json
import os
import tempfile

from bert4keras.models import build_transformer_model

CONFIGS = %(configs)r
NOISE = %(noise)r
SEED = %(seed)d
work = tempfile.mkdtemp(prefix="b4k_t5_")


def build(version, checkpoint):
    K.clear_session()
    np.random.seed(SEED)
    tf.compat.v1.set_random_seed(SEED)
    path = os.path.join(work, version + ".json")
    with open(path, "w") as f:
        json.dump(CONFIGS[version], f)
    transformer = build_transformer_model(path, checkpoint, model=version, return_keras_model=False)
    session()
    return transformer


def record(version, transformer):
    model = transformer.model
    scale = transformer.layers["Decoder-Output-Scale"].get_output_at(-1)
    fetches = [transformer.encoder.outputs[0], scale, model.outputs[0]]
    feeds = [inputs["encoder_ids"].astype("float32"), inputs["decoder_ids"].astype("float32")]
    values = K.function(model.inputs, fetches)(feeds)
    for name, value in zip(["encoder", "decoder_hidden", "probs"], values):
        outputs["%%s|%%s" %% (version, name)] = value
    for part, net in [("model", model), ("encoder", transformer.encoder), ("decoder", transformer.decoder)]:
        outputs["%%s|layers_%%s" %% (version, part)] = np.array(sorted(layer.name for layer in net.layers))
        outputs["%%s|inputs_%%s" %% (version, part)] = np.array([i.name.split(":")[0] for i in net.inputs])


def encode(name):
    return name.replace("/", "~")
"""

FORWARD = r"""
for version in CONFIGS:
    transformer = build(version, None)
    rng = np.random.RandomState(SEED)
    weights = transformer.model.trainable_weights
    values = K.batch_get_value(weights)
    K.batch_set_value([(w, v + rng.normal(0, NOISE, v.shape).astype(v.dtype)) for w, v in zip(weights, values)])
    path = os.path.join(work, version, "model.ckpt")
    os.makedirs(os.path.dirname(path))
    transformer.save_weights_as_checkpoint(path)
    reader = tf.train.load_checkpoint(path)
    for name in reader.get_variable_to_shape_map():
        outputs["%s|var|%s" % (version, encode(name))] = reader.get_tensor(name)
    record(version, transformer)
"""

REVERSE = r"""
def write_checkpoint(path, values):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.Graph().as_default():
        variables = {name: tf.compat.v1.Variable(value, name="v%d" % i)
                     for i, (name, value) in enumerate(sorted(values.items()))}
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver(variables).save(sess, path)


for version in CONFIGS:
    head = version + "|var|"
    values = {k[len(head):].replace("~", "/"): v for k, v in inputs.items() if k.startswith(head)}
    path = os.path.join(work, version, "ours", "model.ckpt")
    write_checkpoint(path, values)
    record(version, build(version, path))
"""


def _snippet(loop):
    return PRELUDE % {"configs": {v: CONFIGS[v] for v in VERSIONS}, "noise": NOISE, "seed": SEED} + loop


def _split(results):
    split = {}
    for name, value in results.items():
        version, _, item = name.partition("|")
        split.setdefault(version, {})[item] = value
    return split


_CACHE = {}


def reference():
    if "forward" not in _CACHE:
        _CACHE["forward"] = _split(run_bert4keras_code(_snippet(FORWARD), batch(), graph=True, seed=SEED))
    return _CACHE["forward"]


def our_outputs(transformer):
    import keras

    data = batch()
    net = transformer.model
    # the decoder's hidden states (Decoder-Output-Scale) of the joint graph, the last it built
    fetch = keras.Model(net.inputs, [transformer.encoder_output, transformer._decoder.encoder_output, net.outputs[0]])
    values = fetch([data["encoder_ids"], data["decoder_ids"]], training=False)
    return {
        name: np.asarray(keras.ops.convert_to_numpy(v))
        for name, v in zip(["encoder", "decoder_hidden", "probs"], values)
    }


def compare(ours, ref, label):
    problems, diffs = [], {}
    for item, atol in (("encoder", HIDDEN_ATOL), ("decoder_hidden", HIDDEN_ATOL), ("probs", PROBS_ATOL)):
        if ours[item].shape != ref[item].shape:
            problems.append(f"{item}: shape {ours[item].shape}, bert4keras {ref[item].shape}")
            continue
        diffs[item] = float(np.abs(ours[item].astype(np.float64) - ref[item]).max())
        if not diffs[item] <= atol:
            problems.append(f"{item}: max|diff| {diffs[item]:.3e} > {atol:g}")
    # the logits up to each row's constant (all a softmax sees): log-probabilities, 1e-4
    diffs["log_probs"] = float(np.abs(np.log(ours["probs"].astype(np.float64)) - np.log(ref["probs"])).max())
    if not diffs["log_probs"] <= LOGITS_ATOL:
        problems.append(f"log_probs: max|diff| {diffs['log_probs']:.3e} > {LOGITS_ATOL:g}")
    print(f"[{label}] " + ", ".join(f"{k}={v:.2e}" for k, v in diffs.items()))
    return problems


def _variables(ref):
    return {k[4:].replace("~", "/"): v for k, v in ref.items() if k.startswith("var|")}


_LOADED = {}


def loaded(version, tmp_dir):
    """Our T5 of ``version`` with bert4keras's weights (a dict for t5.1.0, a checkpoint file we
    write and a config file for mt5.1.1)."""
    if version not in _LOADED:
        ref = reference()[version]
        variables = _variables(ref)
        config, checkpoint = CONFIGS[version], variables
        if version == "mt5.1.1":
            from gau_keras.checkpoints import save_checkpoint
            from tests.model_utils import write_config

            os.makedirs(tmp_dir, exist_ok=True)
            checkpoint = save_checkpoint(os.path.join(tmp_dir, "model.ckpt"), variables)
            config = write_config(tmp_dir, config)
        transformer = build_transformer_model(config, checkpoint, model=version, return_keras_model=False)
        _LOADED[version] = transformer, our_outputs(transformer), ref
    return _LOADED[version]


def our_checkpoint(transformer, directory):
    import tensorflow as tf

    path = os.path.join(directory, "model.ckpt")
    transformer.save_weights_as_checkpoint(path)
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("version", VERSIONS)
def test_loads_bert4keras_t5_weights_and_matches_outputs(version, tmp_path):
    _, ours, ref = loaded(version, str(tmp_path))
    problems = compare(ours, ref, f"bert4keras->ours {version}")
    assert not problems, f"{version}: " + "; ".join(problems)


@pytest.mark.parametrize("version", VERSIONS)
def test_saves_bert4keras_t5_checkpoint_names_shapes_values(version, tmp_path):
    transformer, _, ref = loaded(version, str(tmp_path / "load"))
    expected = _variables(ref)
    ours = our_checkpoint(transformer, str(tmp_path / "ours"))
    assert sorted(ours) == sorted(expected)
    for name, value in expected.items():
        assert ours[name].shape == value.shape, name
        np.testing.assert_allclose(ours[name], value, rtol=0, atol=1e-7, err_msg=f"{version}: {name}")


@pytest.mark.parametrize("version", VERSIONS)
def test_t5_layer_and_input_names_are_bert4keras(version, tmp_path):
    transformer, _, ref = loaded(version, str(tmp_path))
    for part, net in (("model", transformer.model), ("encoder", transformer.encoder), ("decoder", transformer.decoder)):
        assert sorted(layer.name for layer in net.layers) == ref[f"layers_{part}"].tolist(), part
        assert [i.name for i in net.inputs] == ref[f"inputs_{part}"].tolist(), part


_REVERSE = {}


def _deterministic_weights(transformer, seed):
    """Seeded values around each weight's initial level (ones for norm scales): the same on
    every backend, so the reference result stays cached."""
    import keras

    rng = np.random.default_rng(seed)
    for weight in transformer.model.trainable_weights:
        value = np.asarray(keras.ops.convert_to_numpy(weight))
        weight.assign((np.round(value.mean()) + rng.normal(scale=NOISE, size=value.shape)).astype(value.dtype))


def reverse_results(tmp_dir):
    if not _REVERSE:
        arrays = dict(batch())
        for index, version in enumerate(VERSIONS):
            transformer = build_transformer_model(CONFIGS[version], model=version, return_keras_model=False)
            _deterministic_weights(transformer, SEED + index)
            variables = our_checkpoint(transformer, os.path.join(tmp_dir, version))
            arrays.update({f"{version}|var|{name.replace('/', '~')}": v for name, v in variables.items()})
            _REVERSE[version] = our_outputs(transformer)
        refs = _split(run_bert4keras_code(_snippet(REVERSE), arrays, graph=True, seed=SEED))
        for version in VERSIONS:
            _REVERSE[version] = (_REVERSE[version], refs[version])
    return _REVERSE


@pytest.mark.parametrize("version", VERSIONS)
def test_bert4keras_loads_our_t5_checkpoint_and_matches_outputs(version, tmp_path_factory):
    ours, ref = reverse_results(str(tmp_path_factory.mktemp("reverse")))[version]
    problems = compare(ours, ref, f"ours->bert4keras {version}")
    assert not problems, f"{version}: " + "; ".join(problems)


def test_the_batch_pads_both_sides():
    data = batch()
    assert (data["encoder_ids"] == 0).any(axis=1).tolist() == [True, False, True]
    assert (data["decoder_ids"][:, 1:] == 0).any(axis=1).tolist() == [True, False, True]
    assert json.dumps(CONFIGS["mt5.1.1"]["hidden_act"]) == '["gelu", "linear"]'
