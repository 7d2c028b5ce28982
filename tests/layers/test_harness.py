"""Every registered gau_keras layer through one harness, in the spirit of Keras's ``run_layer_test``.

The layers come from Keras's registry (every class registered under ``gau_keras>``), so a new
layer cannot skip it: ``test_every_registered_layer_has_a_recipe`` fails until RECIPES has one.
For each layer, with every weight moved off its initial value:
* its config is JSON and ``from_config`` remakes a layer that, given the same weights, computes
  the same outputs;
* under ``mixed_bfloat16`` it computes the float32 outputs within bfloat16's precision;
* a model holding it, saved as ``.keras``, loads in a fresh process (``import gau_keras`` only,
  safe mode) and predicts the same.
Both backends (the JAX pass runs it too).
"""
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import gau_keras.layers  # noqa: F401 - registers the layers
import gau_keras.models  # noqa: F401 - and the models' own (SegmentMemory)
from gau_keras.registration import PACKAGE
from tests.conftest import REPO_ROOT
from tests.layer_utils import MeanLoss

pytestmark = pytest.mark.both_backends

B, L, H = 2, 5, 8


def _floats(*shape):
    return lambda rng: rng.normal(size=shape).astype("float32")


def _ints(high, *shape):
    return lambda rng: rng.integers(1, high, size=shape).astype("int32")


def _fixed(value):
    return lambda rng: np.asarray(value)


#: class name -> (constructor arguments, input makers (one per input), call arguments)
RECIPES = {
    "Add": ({}, [_floats(B, L, H), _floats(B, L, H)], {}),
    "AttentionBias": ({"mode": "unilm"}, [_fixed(np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]], "int32"))], {}),
    "CandidateScores": ({}, [_floats(B, 3, 7), _ints(7, B, 4, 3)], {}),
    "ChoiceLogits": ({}, [_floats(B * 3, 1), _ints(9, B, 3, L)], {}),
    "Concatenate1D": ({}, [_floats(B, L, H), _floats(B, 3, H)], {}),
    "ConditionalRandomField": ({}, [_floats(B, L, 4)], {}),
    "EfficientGlobalPointer": ({"heads": 2, "head_size": 4}, [_floats(B, L, H)], {}),
    "Embedding": ({"input_dim": 11, "output_dim": H}, [_ints(11, B, L)], {}),
    "FeedForward": ({"units": 12}, [_floats(B, L, H)], {}),
    "FirstToken": ({}, [_floats(B, L, H)], {}),
    "FlattenChoices": ({}, [_ints(9, B, 3, L)], {}),
    "GatedAttentionUnit": ({"units": 12, "key_size": 4}, [_floats(B, L, H)], {}),
    "GatherPositions": ({}, [_floats(B, L, H), _fixed(np.array([[0, 2, 4], [1, 1, 3]], "int32"))], {}),
    "GlobalMaxPooling1D": ({}, [_floats(B, L, H)], {}),
    "GlobalPointer": ({"heads": 2, "head_size": 4}, [_floats(B, L, H)], {}),
    "LayerNormalization": ({}, [_floats(B, L, H)], {}),
    "Loss": ({}, [_floats(B, L, H)], {}),                 # run as its subclass MeanLoss
    "MaximumEntropyMarkovModel": ({}, [_floats(B, L, 4)], {}),
    "MultiHeadAttention": ({"heads": 2, "head_size": 4}, [_floats(B, L, H)] * 3, {}),
    "PositionEmbedding": ({"input_dim": 10, "output_dim": H}, [_floats(B, L, H)], {}),
    "RelativePositionEmbedding": ({"input_dim": 7, "output_dim": 4}, [_floats(B, L, H), _floats(B, L, H)], {}),
    "RelativePositionEmbeddingT5": ({"input_dim": 8, "output_dim": 2}, [_floats(B, L, H), _floats(B, L, H)], {}),
    "SRUpp": ({"hidden_size": H, "proj_size": 4}, [_floats(B, L, H)], {}),
    "SRUppAttention": ({"proj_size": 4, "out_features": 12}, [_floats(B, L, H)], {}),
    "SRUppCell": ({"hidden_size": H, "proj_size": 4}, [_floats(B, L, H)], {}),
    "SRUppProjectedLinear": ({"proj_size": 4, "out_features": 12}, [_floats(B, L, H)], {}),
    "ScaleOffset": ({}, [_floats(B, L, H)], {}),
    "SegmentMemory": ({"memory_length": 3}, [_floats(B, 3, H), _floats(B, L, H)], {}),
    "SinusoidalPositionEmbedding": ({"output_dim": H}, [_floats(B, L, H)], {}),
    "SpanLogits": ({}, [_floats(B, L, 2), _ints(9, B, L)], {}),
}

#: stand-ins for abstract registered classes
CONCRETE = {"Loss": MeanLoss}


def registered_layers():
    """{class name: class} of every layer (not model) class registered under gau_keras."""
    return {name.split(">", 1)[1]: obj for name, obj in keras.saving.get_custom_objects().items()
            if name.startswith(f"{PACKAGE}>") and isinstance(obj, type)
            and issubclass(obj, keras.layers.Layer) and not issubclass(obj, keras.Model)}


def test_every_registered_layer_has_a_recipe():
    missing = sorted(set(registered_layers()) - set(RECIPES))
    assert not missing, f"registered layers without a recipe in tests/layers/test_harness.py: {missing}"
    stale = sorted(set(RECIPES) - set(registered_layers()))
    assert not stale, f"recipes for layers that are not registered: {stale}"


def _arrays(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    return [make(rng) for make in RECIPES[name][1]]


def _model(name, dtype=None, config=None):
    """A functional model around one layer of class ``name`` (from ``config`` when given)."""
    cls = CONCRETE.get(name, registered_layers()[name])
    kwargs, _, call_kwargs = RECIPES[name]
    layer = cls.from_config(config) if config is not None else cls(**kwargs, **({"dtype": dtype} if dtype else {}))
    arrays = _arrays(name)
    inputs = [keras.Input(a.shape[1:], dtype=str(a.dtype), batch_size=a.shape[0]) for a in arrays]
    outputs = layer(inputs if len(inputs) > 1 else inputs[0], **call_kwargs)
    return keras.Model(inputs, outputs), layer, arrays


def _moved_weights(layer, seed=0):
    """Every weight off its initial value (so that a weight lost or swapped shows)."""
    rng = np.random.default_rng(seed)
    return [w + 0.3 * rng.normal(size=w.shape).astype(w.dtype) for w in layer.get_weights()]


def _outputs(model, arrays):
    return [np.asarray(keras.ops.convert_to_numpy(o)) for o in keras.tree.flatten(model(arrays))]


def _close(got, expected, atol):
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        if e.dtype == bool or np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(g, e)
            continue
        g, e = g.astype("float32"), e.astype("float32")
        finite = np.isfinite(e)
        np.testing.assert_array_equal(np.isfinite(g), finite)
        np.testing.assert_allclose(g[finite], e[finite], atol=atol * (1 + np.abs(e[finite]).max(initial=0)))


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_config_round_trip_and_mixed_precision(name):
    model, layer, arrays = _model(name)
    weights = _moved_weights(layer)
    layer.set_weights(weights)
    expected = _outputs(model, arrays)
    config = layer.get_config()
    json.dumps(keras.saving.serialize_keras_object(layer))          # the config is JSON
    remade_model, remade, _ = _model(name, config=config)
    remade.set_weights(weights)
    _close(_outputs(remade_model, arrays), expected, atol=1e-6)
    assert remade.get_config() == config
    half_model, half, _ = _model(name, dtype="mixed_bfloat16")
    half.set_weights(weights)
    _close(_outputs(half_model, arrays), expected, atol=5e-2)


RELOAD = """
import json, sys, traceback
import numpy as np
import gau_keras, keras
sys.path.insert(0, sys.argv[3])
import tests.layer_utils  # noqa: F401 - registers MeanLoss, the stand-in of the abstract Loss
results = {}
for job in json.loads(sys.argv[1]):
    try:
        model = keras.saving.load_model(job["path"], safe_mode=True)
        arrays = [np.load(path) for path in job["inputs"]]
        outputs = keras.tree.flatten(model(arrays if len(arrays) > 1 else arrays[0]))
        np.savez(job["out"], *[np.asarray(keras.ops.convert_to_numpy(o)) for o in outputs])
        results[job["name"]] = None
    except Exception:
        results[job["name"]] = traceback.format_exc()[-3000:]
json.dump(results, open(sys.argv[2], "w"))
"""


@pytest.fixture(scope="module")
def reloaded(tmp_path_factory):
    """{name: (outputs here, error in the fresh process or None, its outputs file)}."""
    root = tmp_path_factory.mktemp("harness")
    jobs, expected = [], {}
    for name in sorted(RECIPES):
        model, layer, arrays = _model(name)
        layer.set_weights(_moved_weights(layer))
        expected[name] = _outputs(model, arrays)
        path = str(root / f"{name}.keras")
        model.save(path)
        inputs = []
        for i, a in enumerate(arrays):
            inputs.append(str(root / f"{name}_{i}.npy"))
            np.save(inputs[-1], a)
        jobs.append({"name": name, "path": path, "inputs": inputs, "out": str(root / f"{name}_out.npz")})
    results = root / "results.json"
    run = subprocess.run([sys.executable, "-c", RELOAD, json.dumps(jobs), str(results), str(REPO_ROOT)],
                         capture_output=True, text=True, timeout=900, cwd=REPO_ROOT, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    errors = json.loads(results.read_text())
    return {job["name"]: (expected[job["name"]], errors[job["name"]], job["out"]) for job in jobs}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_keras_file_reloads_in_a_fresh_process(reloaded, name):
    expected, error, out = reloaded[name]
    assert error is None, error
    with np.load(out) as saved:
        got = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    _close(got, expected, atol=1e-6)
