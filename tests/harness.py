"""The test harness every layer and Backbone test calls (in the spirit of keras-hub's TestCase).

``run_layer_test(cls, init_kwargs, input_data, expected_output_shape)``: the real output's
shape, ``compute_output_shape`` and the symbolic output against it; with every weight moved off
its initial value, the ``get_config``/``from_config`` round trip computes the same outputs; the
output mask (``compute_mask``) where the layer supports masks; ``mixed_float16`` and
``mixed_bfloat16`` keep float32 variables and compute finite outputs near float32's; a model
holding the layer, saved as ``.keras``, loads in a fresh process and predicts the same.

``run_backbone_test(cls, init_kwargs, input_data)``: the config round trip, the ``.keras``
reload in a fresh process (of the Backbone and of its Keras 2 face, the class
build_transformer_model's models have), both mixed precision policies, and ``from_preset`` on a
tiny model directory (bert_config.json, vocab.txt, checkpoint) written here.

The fresh process is one per test session (``Reloader``): it imports ``gau_keras`` (and
tests/layer_utils.py's MeanLoss) only, then loads the files the tests send it one after the
other, in safe mode. A load that registers a class ``import gau_keras`` had not registered fails:
so every load sees what a process of its own would see, for the price of one start.
Tests calling these functions are marked ``both_backends``, so both backends run them.
tests/test_harness.py fails for a registered layer or Backbone that no test passes to them.
"""

import atexit
import inspect
import json
import os
import select
import subprocess
import sys
import tempfile

import keras
import numpy as np

from gau_keras.bert4keras.model import keras2
from tests.conftest import REPO_ROOT

#: how far mixed precision outputs may be from float32's, relative to the largest output
MIXED_TOLERANCE = {"mixed_float16": 1e-2, "mixed_bfloat16": 5e-2}
#: a Backbone's constructor arguments that are build options, not a released config's keys
#: (with these, and those named ``with_*``, from_preset builds what the constructor built)
BUILD_OPTIONS = {"application", "keep_tokens", "compound_tokens"}
#: an output at least this large is a mask value (-1e12 for a masked logit): float16 holds it as inf
MASK_VALUE = 6.0e4
#: marks expected_output_mask's default: the input mask
SAME_AS_INPUT = "same as the input mask"
#: a padding mask of a batch of 2 sequences of length 5
PADDING = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
#: token ids (vocabulary 60, the second sequence padded) and segment ids for a Backbone
TOKEN_IDS = np.array([[2, 5, 7, 9, 11, 3, 0, 0], [2, 4, 3, 8, 11, 13, 17, 3]], "int32")
SEGMENT_IDS = np.array([[0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1]], "int32")


def floats(*shape, seed=0):
    """Normal float32 numbers of ``shape``."""
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def ints(high, *shape, seed=0):
    """int32 numbers in [1, high) of ``shape``."""
    return np.random.default_rng(seed).integers(1, high, size=shape).astype("int32")


def run_layer_test(
    cls,
    init_kwargs,
    input_data,
    expected_output_shape,
    call_kwargs=None,
    input_mask=None,
    expected_output_mask=SAME_AS_INPUT,
    atol=1e-6,
):
    """Every generic check of a layer class (module docstring); ``input_data``: an array or a list
    of arrays (one per input); ``expected_output_shape``: a shape or a list of shapes (one per
    output); ``input_mask``: required for a layer that supports masks."""
    call_kwargs = call_kwargs or {}
    arrays = [np.asarray(a) for a in (input_data if isinstance(input_data, (list, tuple)) else [input_data])]
    expected_shapes = _shapes_list(expected_output_shape)
    _check_shapes(cls, init_kwargs, arrays, call_kwargs, expected_shapes)
    model, layer = layer_model(cls, init_kwargs, arrays, call_kwargs)
    weights = moved_weights(layer.weights)
    layer.set_weights(weights)
    expected = outputs_of(model, arrays)
    _check_config(cls, layer, arrays, call_kwargs, weights, expected, atol)
    _check_mask(cls, init_kwargs, arrays, call_kwargs, input_mask, expected_output_mask)
    for policy, tolerance in MIXED_TOLERANCE.items():
        half_model, half = layer_model(cls, {**init_kwargs, "dtype": policy}, arrays, call_kwargs)
        half.set_weights(weights)
        _check_mixed(cls, policy, half, outputs_of(half_model, arrays), expected, tolerance)
    assert_reloads_in_fresh_process(model, arrays, expected, cls.__name__, atol)


def run_backbone_test(cls, init_kwargs, input_data, expected_output_shape=None, checkpoint_writer=None, atol=1e-5):
    """Every generic check of a Backbone class (module docstring); ``input_data``: the list of
    input arrays; ``expected_output_shape``: a shape or a list of shapes, one per output;
    ``checkpoint_writer``: the Backbone class, computing what ``cls`` computes with the same
    checkpoint, whose checkpoint the preset holds (default ``cls``; AlbertUnsharedBackbone's
    layers, trained apart, have no checkpoint: it reads ALBERT's)."""
    arrays = [np.asarray(a) for a in input_data]
    model = cls(**init_kwargs)
    weights = moved_weights(model.weights, trainable_only=True)  # fixed tables are no checkpoint's
    model.set_weights(weights)
    expected = outputs_of(model, arrays)
    if expected_output_shape is not None:
        shapes = [e.shape for e in expected]
        assert shapes == _shapes_list(expected_output_shape), f"{cls.__name__}: output shapes {shapes}"
    config = model.get_config()
    json.dumps(keras.saving.serialize_keras_object(model))
    remade = cls.from_config(json.loads(json.dumps(config)))
    assert type(remade) is cls and remade.get_config() == config, f"{cls.__name__}: config round trip"
    remade.set_weights(weights)
    assert_close(outputs_of(remade, arrays), expected, atol, f"{cls.__name__}.from_config")
    if checkpoint_writer is None:
        _check_preset(cls, init_kwargs, model, arrays, expected, atol)
    else:
        writer = checkpoint_writer(**init_kwargs)
        writer.set_weights(moved_weights(writer.weights, trainable_only=True))
        _check_preset(cls, init_kwargs, writer, arrays, outputs_of(writer, arrays), atol)
    for policy, tolerance in MIXED_TOLERANCE.items():
        with dtype_policy(policy):
            half = cls(**init_kwargs)
        half.set_weights(weights)
        _check_mixed(cls, policy, half, outputs_of(half, arrays), expected, tolerance)
    assert_reloads_in_fresh_process(model, arrays, expected, cls.__name__, atol)
    face = keras2(remade)  # its Keras 2 face (build_transformer_model's model): a class of its own
    assert_reloads_in_fresh_process(face, arrays, expected, f"{cls.__name__}'s Keras 2 face", atol)


def layer_model(cls, init_kwargs, arrays, call_kwargs=None, config=None):
    """(a functional model around one layer of ``cls``, the layer) on inputs shaped as ``arrays``;
    the layer is ``cls.from_config(config)`` when ``config`` is given."""
    layer = cls.from_config(config) if config is not None else cls(**init_kwargs)
    inputs = [keras.Input(a.shape[1:], dtype=str(a.dtype), batch_size=a.shape[0]) for a in arrays]
    outputs = layer(inputs if len(inputs) > 1 else inputs[0], **(call_kwargs or {}))
    return keras.Model(inputs if len(inputs) > 1 else inputs[0], outputs), layer


def moved_weights(variables, seed=0, trainable_only=False):
    """The values of ``variables``, every floating one (trainable one) moved off its initial value,
    so that a weight lost or swapped shows."""
    rng = np.random.default_rng(seed)
    values = []
    for variable in variables:
        value = np.asarray(keras.ops.convert_to_numpy(variable))
        if np.issubdtype(value.dtype, np.floating) and (variable.trainable or not trainable_only):
            value = value + (0.3 * rng.normal(size=value.shape)).astype(value.dtype)
        values.append(value)
    return values


def outputs_of(model, arrays):
    """The model's flattened outputs on ``arrays`` as numpy arrays."""
    got = model(arrays if len(arrays) > 1 else arrays[0])
    return [np.asarray(keras.ops.convert_to_numpy(o)) for o in keras.tree.flatten(got)]


def assert_close(got, expected, atol, what):
    """Equal shapes, equal integers and booleans; floats within ``atol`` times (1 + the largest
    expected magnitude below MASK_VALUE), and of the expected sign and at least MASK_VALUE in
    magnitude (infinite included) where the expected value is a mask value that large."""
    assert len(got) == len(expected), f"{what}: {len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"{what}: output {i} has shape {g.shape}, expected {e.shape}"
        if e.dtype == bool or np.issubdtype(e.dtype, np.integer):
            np.testing.assert_array_equal(g, e, err_msg=f"{what}: output {i}")
            continue
        g, e = g.astype("float32"), e.astype("float32")
        infinite = ~np.isfinite(e)
        np.testing.assert_array_equal(g[infinite], e[infinite], err_msg=f"{what}: output {i}'s non-finite entries")
        masked = np.isfinite(e) & (np.abs(e) >= MASK_VALUE)
        np.testing.assert_array_equal(np.sign(g[masked]), np.sign(e[masked]), err_msg=f"{what}: output {i}")
        assert (np.abs(g[masked]) >= MASK_VALUE).all(), f"{what}: output {i} lost its mask values"
        g, e = g[~masked & ~infinite], e[~masked & ~infinite]
        assert np.isfinite(g).all(), f"{what}: output {i} is not finite where the expected output is"
        np.testing.assert_allclose(g, e, atol=atol * (1 + np.abs(e).max(initial=0)), err_msg=f"{what}: output {i}")


class dtype_policy:
    """Context manager: Keras's global dtype policy set to ``policy``, restored on exit."""

    def __init__(self, policy):
        self.policy = policy

    def __enter__(self):
        self.previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(self.policy)

    def __exit__(self, *exc):
        keras.config.set_dtype_policy(self.previous)


def _shapes_list(shape):
    """A shape, or a list of shapes, as a list of tuples."""
    if isinstance(shape, tuple) and all(d is None or isinstance(d, int) for d in shape):
        return [shape]
    return [tuple(s) for s in shape]


def _check_shapes(cls, init_kwargs, arrays, call_kwargs, expected_shapes):
    """The eager call's output shapes, the symbolic ones and ``compute_output_shape``'s (where the
    class defines it) are ``expected_shapes``; the call built the layer."""
    layer = cls(**init_kwargs)
    real = [tuple(o.shape) for o in keras.tree.flatten(layer(arrays if len(arrays) > 1 else arrays[0], **call_kwargs))]
    assert real == expected_shapes, f"{cls.__name__}: output shapes {real}, expected {expected_shapes}"
    assert layer.built, f"{cls.__name__}: not built by its first call"
    model, _ = layer_model(cls, init_kwargs, arrays, call_kwargs)
    symbolic = [tuple(o.shape) for o in keras.tree.flatten(model.outputs)]
    assert symbolic == expected_shapes, f"{cls.__name__}: symbolic output shapes {symbolic}"
    if type(layer).compute_output_shape is not keras.layers.Layer.compute_output_shape:
        shapes = [a.shape for a in arrays]
        computed = layer.compute_output_shape(shapes if len(shapes) > 1 else shapes[0])
        computed = [tuple(s) for s in _shapes_list(computed)]
        assert computed == expected_shapes, f"{cls.__name__}.compute_output_shape: {computed}"


def _check_config(cls, layer, arrays, call_kwargs, weights, expected, atol):
    """JSON config; ``from_config`` remakes a layer computing the same outputs, and the same config."""
    config = layer.get_config()
    json.dumps(keras.saving.serialize_keras_object(layer))
    remade_model, remade = layer_model(cls, None, arrays, call_kwargs, config=json.loads(json.dumps(config)))
    remade.set_weights(weights)
    assert_close(outputs_of(remade_model, arrays), expected, atol, f"{cls.__name__}.from_config")
    assert remade.get_config() == config, f"{cls.__name__}: from_config(config).get_config() differs"


def _supports_masks(layer):
    return layer.supports_masking or type(layer).compute_mask is not keras.layers.Layer.compute_mask


def _check_mask(cls, init_kwargs, arrays, call_kwargs, input_mask, expected_output_mask):
    """A layer that supports masks gets one: it calls with it and computes the expected output mask."""
    layer = cls(**init_kwargs)
    if input_mask is None:
        assert not _supports_masks(layer), f"{cls.__name__} supports masks: pass input_mask to run_layer_test"
        return
    data = arrays if len(arrays) > 1 else arrays[0]
    masks = [None if m is None else np.asarray(m) for m in _as_list(input_mask)]
    masks = masks if isinstance(input_mask, (list, tuple)) else masks[0]
    if "mask" in inspect.signature(layer.call).parameters:
        layer(data, mask=masks, **call_kwargs)
    else:
        layer(data, **call_kwargs)
    got = _as_list(layer.compute_mask(data, masks))
    wanted = _as_list(masks if expected_output_mask is SAME_AS_INPUT else expected_output_mask)
    assert len(got) == len(wanted), f"{cls.__name__}.compute_mask: {len(got)} masks, expected {len(wanted)}"
    for g, w in zip(got, wanted):
        assert (g is None) == (w is None), f"{cls.__name__}.compute_mask: {g}, expected {w}"
        if w is not None:
            np.testing.assert_array_equal(
                np.asarray(keras.ops.convert_to_numpy(g)).astype(bool),
                np.asarray(w).astype(bool),
                err_msg=f"{cls.__name__}.compute_mask",
            )


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _check_mixed(cls, policy, model_or_layer, got, expected, tolerance):
    """Under ``policy``: float32 variables, finite outputs where float32's are, near them."""
    wrong = [v.path for v in model_or_layer.weights if keras.backend.is_float_dtype(v.dtype) and v.dtype != "float32"]
    assert not wrong, f"{cls.__name__} under {policy}: variables not float32: {wrong}"
    assert_close(got, expected, tolerance, f"{cls.__name__} under {policy}")


def _check_preset(cls, init_kwargs, model, arrays, expected, atol):
    """``cls.from_preset`` of a model directory holding the config and ``model``'s checkpoint
    predicts ``expected`` (the build options go to from_preset)."""
    options = {k: v for k, v in init_kwargs.items() if k in BUILD_OPTIONS or k.startswith("with_")}
    config = {k: v for k, v in init_kwargs.items() if k not in options}
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "bert_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
        with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(f"[unused{i}]\n" for i in range(config["vocab_size"])))
        model.transformer.save_weights_as_checkpoint(os.path.join(folder, "bert_model.ckpt"))
        loaded = cls.from_preset(folder, **options)
    assert isinstance(loaded, cls), f"{cls.__name__}.from_preset gave a {type(loaded).__name__}"
    assert_close(outputs_of(loaded, arrays), expected, atol, f"{cls.__name__}.from_preset")


def assert_reloads_in_fresh_process(model, arrays, expected, what, atol=1e-6):
    """``model`` saved as ``.keras`` loads in a fresh process (``import gau_keras`` only, safe
    mode) and computes ``expected`` on ``arrays``."""
    with tempfile.TemporaryDirectory() as folder:
        job = {
            "path": os.path.join(folder, "model.keras"),
            "out": os.path.join(folder, "out.npz"),
            "inputs": [os.path.join(folder, f"input{i}.npy") for i in range(len(arrays))],
        }
        model.save(job["path"])
        for path, array in zip(job["inputs"], arrays):
            np.save(path, array)
        error = reloader().run(job)
        assert error is None, f"{what}: the .keras file does not load in a fresh process:\n{error}"
        with np.load(job["out"]) as saved:
            got = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    assert_close(got, expected, atol, f"{what} reloaded in a fresh process")


WORKER = r"""
import json, sys, traceback
import numpy as np
import gau_keras, keras
sys.path.insert(0, sys.argv[1])
import tests.layer_utils  # noqa: F401 - registers MeanLoss, the stand-in of the abstract Loss
registered = set(keras.saving.get_custom_objects())
print("READY", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    try:
        model = keras.saving.load_model(job["path"], safe_mode=True)
        arrays = [np.load(path) for path in job["inputs"]]
        outputs = keras.tree.flatten(model(arrays if len(arrays) > 1 else arrays[0]))
        np.savez(job["out"], *[np.asarray(keras.ops.convert_to_numpy(o)) for o in outputs])
        new = sorted(set(keras.saving.get_custom_objects()) - registered)
        error = f"loading it registered {new}, which import gau_keras alone does not" if new else None
    except Exception:
        error = traceback.format_exc()[-3000:]
    print("RESULT " + json.dumps(error), flush=True)
"""


class Reloader:
    """One fresh Python process (this backend, ``import gau_keras`` only) loading ``.keras`` files."""

    def __init__(self, timeout=600):
        self.timeout = timeout
        self.log = tempfile.TemporaryFile(mode="w+")
        env = {k: v for k, v in os.environ.items() if k != "GAU_KERAS_TF_FREE"}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(REPO_ROOT)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            bufsize=1,
        )
        self._read("READY")

    def _read(self, prefix):
        """The first line of the worker's output starting with ``prefix`` (without it)."""
        while True:
            ready, _, _ = select.select([self.process.stdout], [], [], self.timeout)
            line = self.process.stdout.readline() if ready else ""
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
            if not line:
                self.close()
                self.log.seek(0)
                raise RuntimeError(
                    f"the reloading process stopped (or took over {self.timeout} s):\n{self.log.read()[-3000:]}"
                )

    def run(self, job):
        """None, or the error of loading and running ``job`` (see WORKER)."""
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        return json.loads(self._read("RESULT "))

    def alive(self):
        return self.process.poll() is None

    def close(self):
        if self.alive():
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


_RELOADER = []


def reloader():
    """The session's Reloader (started on first use, restarted if it stopped)."""
    if not _RELOADER or not _RELOADER[0].alive():
        _RELOADER[:] = [Reloader()]
        atexit.register(_RELOADER[0].close)
    return _RELOADER[0]
