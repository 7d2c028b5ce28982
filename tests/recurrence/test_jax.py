"""gau_keras.recurrence on Keras 3's JAX backend (``recurrence.jax``: its lax.scan
pair, lax.scan forward and hand-written custom_vjp backward, on this CPU).

This process runs on TensorFlow; every JAX check runs in ONE subprocess
(``KERAS_BACKEND=jax``, ``JAX_ENABLE_X64=1`` for float64) started by the
``jax_run`` fixture, which hands it the inputs and TensorFlow's results through
.npz files and gets back arrays and outcomes the tests assert on here:

* the recurrence (k = 3 and 4, uni/bidirectional, with and without padding,
  c0, scale_x, dropout mask; float64): forward equal to the TensorFlow path
  and to a plain autodiff ``lax.scan`` (``recurrence.jax.autodiff``); gradients w.r.t.
  U, x, weight_c, bias, c0 and scale_x equal to that autodiff reference
  (≤ 1e-6, measured ~1e-15) and to TensorFlow's hand-written ones;
* ``jax.jit`` / ``jax.eval_shape``, float16/bfloat16 computed in float32,
  argument errors, and that the TensorFlow recurrence modules stay unimported;
* a tiny ``build_transformer_model(model='srupp')`` with TensorFlow's weights:
  the same predictions, and after one SGD step the same weights;
* the official-SRU++ parity tests of tests/layers/test_srupp.py (their numpy
  transcription of the reference, their random state dicts), run under JAX.

Skipped where jax is not installed.
"""

import json
import os
import subprocess
import sys
import traceback

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

DIFF_ARGS = ("U", "x", "weight_c", "bias", "c0", "scale_x")
#: k and bidirectional; every case with c0, padding (right and left), scale_x 1.3 and a dropout mask
CASES = [dict(k=k, bidirectional=bi, pad=True, scale=True, dropout=True) for k in (3, 4) for bi in (False, True)]
CASE_IDS = [f"k{c['k']}-{'bi' if c['bidirectional'] else 'uni'}" for c in CASES]
#: the parity tests of tests/layers/test_srupp.py run under JAX: (test function, its argument or None)
PARITY = [
    ("test_matches_numpy_reference", name)
    for name in ("uni-k4-causal", "bi-layernorm-pre", "post-norm-rescale-every2", "last1-input-to-hidden")
]
PARITY += [("test_memory_equals_concatenated_sequence", None)]
PARITY_IDS = [f"{fn}[{arg}]" if arg else fn for fn, arg in PARITY]
MODEL = dict(
    model="srupp",
    application="encoder",
    vocab_size=23,
    hidden_size=8,
    num_hidden_layers=2,
    proj_size=4,
    num_attention_heads=2,
    attention_every_n_layers=2,
    embedding_size=6,
)
#: TensorFlow's recurrence modules, which a JAX process must never import
TF_MODULES = (
    "gau_keras.recurrence.tensorflow",
    "gau_keras.recurrence.tensorflow.xla_loops",
    "gau_keras.recurrence.tensorflow.native",
    "gau_keras.recurrence.tensorflow.prepare",
    "gau_keras.recurrence.tensorflow.autodiff",
)

JAX_RUN = "import sys; from tests.recurrence import test_jax as T; T.jax_main(*sys.argv[1:])"


# ---------------------------------------------------------------- the JAX process


def _jax_recurrence(arrays, case, out):
    """Forward and gradients of sum(h·w_h) + sum(c·w_c) for the custom_vjp pair
    and for the autodiff reference (each one jitted function), into ``out``."""
    import jax
    import jax.numpy as jnp

    from gau_keras.recurrence import sru_recurrence, sru_recurrence_autodiff

    fixed = {key: arrays.get(key) for key in ("mask_pad", "dropout_mask")}

    def loss(fn):
        def value(U, x, weight_c, bias, c0, scale_x):
            h, c = fn(U, x, weight_c, bias, c0, scale_x=scale_x, bidirectional=case["bidirectional"], **fixed)
            return jnp.sum(h * arrays["w_h"]) + jnp.sum(c * arrays["w_c"]), (h, c)

        return value

    inputs = [jnp.asarray(arrays[key]) for key in DIFF_ARGS]
    for name, fn in (("jax", sru_recurrence), ("autodiff", sru_recurrence_autodiff)):
        (_, (h, c)), grads = jax.jit(jax.value_and_grad(loss(fn), argnums=tuple(range(6)), has_aux=True))(*inputs)
        out[f"{name}/h"], out[f"{name}/c"] = np.asarray(h), np.asarray(c)
        out.update({f"{name}/d{key}": np.asarray(g) for key, g in zip(DIFF_ARGS, grads)})


def _jax_contract(arrays):
    """eval_shape, half precision, argument errors and the dispatch, as a dict of plain values."""
    import jax
    import jax.numpy as jnp

    from gau_keras import recurrence

    args = {key: arrays[key] for key in ("U", "x", "weight_c", "bias", "c0", "mask_pad")}
    spec = jax.eval_shape(
        lambda U, x: recurrence.sru_recurrence(U, x, args["weight_c"], args["bias"], bidirectional=True),
        jax.ShapeDtypeStruct(args["U"].shape, jnp.float32),
        jax.ShapeDtypeStruct(args["x"].shape, jnp.float32),
    )
    result = {"kernel_choice": recurrence.kernel_choice(), "eval_shape": [[list(s.shape), str(s.dtype)] for s in spec]}
    full, _ = recurrence.sru_recurrence(
        **{k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in args.items()}, bidirectional=True
    )
    for dtype in ("float16", "bfloat16"):
        half = {k: jnp.asarray(v, dtype) if v.dtype == np.float64 else v for k, v in args.items()}
        h, c = recurrence.sru_recurrence(**half, bidirectional=True)
        rounded = {k: jnp.asarray(v, jnp.float32) if v.dtype == jnp.dtype(dtype) else v for k, v in half.items()}
        h32, _ = recurrence.sru_recurrence(**rounded, bidirectional=True)
        result[dtype] = {
            "dtypes": [str(h.dtype), str(c.dtype)],
            "error": float(jnp.max(jnp.abs(h.astype(jnp.float32) - h32))),
            "vs_float32_inputs": float(jnp.max(jnp.abs(h32 - full))),
        }
    result["errors"] = {}
    for name, bad in (
        ("weight_c", dict(weight_c=np.zeros(5))),
        ("mask_pad", dict(mask_pad=np.zeros((2, 5, 1)))),
        ("scale_x", dict(scale_x=np.array([1.0, 2.0]))),
        ("native", dict(implementation="native")),
    ):
        try:
            recurrence.sru_recurrence(**{**args, **bad}, bidirectional=True)
            result["errors"][name] = None
        except ValueError as error:
            result["errors"][name] = str(error)
    return result


def _jax_model(arrays):
    """The SRU++ encoder with TensorFlow's weights: predictions, then the weights after one SGD step."""
    import keras

    from gau_keras import build_transformer_model

    model = build_transformer_model(**MODEL)
    model.set_weights([arrays[f"weight/{i}"] for i in range(len(model.weights))])
    out = {"predict": model.predict(arrays["tokens"], verbose=0)}
    model.compile(keras.optimizers.SGD(0.5), "mse")
    out["loss"] = np.asarray(model.train_on_batch(arrays["tokens"], arrays["targets"]))
    out.update({f"trained/{i}": np.asarray(w) for i, w in enumerate(model.get_weights())})
    return out


def _float64_as_on_tensorflow():
    """Keras 3 on JAX demotes float64 to float32 in its own dtype promotion
    (``BIT64_TO_BIT32_DTYPE``) even with jax x64 on, so its LayerNormalization
    computes a float64 layer in float32 (1e-7 off).  With x64 on, this restores
    TensorFlow's rule for the float64 parity tests; returns what the rule was."""
    from keras.src.backend.common import dtypes

    before = dtypes.BIT64_TO_BIT32_DTYPE.get("float64")
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"
    return before


def _jax_parity():
    """The parity tests of tests/layers/test_srupp.py, each called as pytest would (rng
    fixture, Keras seed): {id: None (passed) or the failure's text}."""
    import keras

    from tests.layers import test_srupp

    demoted = _float64_as_on_tensorflow()
    outcome = {"keras float64 rule": demoted}
    for (fn, arg), name in zip(PARITY, PARITY_IDS):
        keras.utils.set_random_seed(1234)
        rng = np.random.default_rng(1234)
        try:
            getattr(test_srupp, fn)(rng, *([arg] if arg else []))
            outcome[name] = None
        except AssertionError:
            outcome[name] = traceback.format_exc(limit=2)[-2000:]
    return outcome


def jax_main(inputs_path, outputs_path, json_path):
    """The JAX process: every check above; arrays to ``outputs_path``, plain results to ``json_path``."""
    import keras

    if keras.backend.backend() != "jax":
        raise RuntimeError(f"tests/recurrence/test_jax.py: expected KERAS_BACKEND=jax, got {keras.backend.backend()}")
    data = dict(np.load(inputs_path))
    by_prefix = lambda prefix: {k[len(prefix) :]: v for k, v in data.items() if k.startswith(prefix)}  # noqa: E731
    arrays = {}
    for i, case in enumerate(CASES):
        out = {}
        _jax_recurrence(by_prefix(f"case{i}/"), case, out)
        arrays.update({f"case{i}/{k}": v for k, v in out.items()})
    arrays.update(_jax_model(by_prefix("model/")))
    results = {"contract": _jax_contract(by_prefix(f"case{len(CASES) - 1}/")), "parity": _jax_parity()}
    results["tf_modules_loaded"] = [m for m in TF_MODULES if m in sys.modules]
    np.savez(outputs_path, **arrays)
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


# ---------------------------------------------------------------- this (TensorFlow) process


def _tf_recurrence(rng, case):
    """Inputs of one case and TensorFlow's forward and gradients on them."""
    import tensorflow as tf

    from gau_keras.recurrence.tensorflow import sru_recurrence
    from tests.recurrence.test_recurrence import make_inputs

    args = make_inputs(rng, **case)
    args["scale_x"] = np.array([args["scale_x"]])  # as the official package keeps it, shape (1,)
    arrays = {k: v for k, v in args.items() if isinstance(v, np.ndarray)}
    dirs = 2 if case["bidirectional"] else 1
    arrays["w_h"] = rng.normal(size=args["U"].shape[:2] + (dirs * 3,))
    arrays["w_c"] = rng.normal(size=args["c0"].shape)
    tensors = {key: tf.constant(args[key]) for key in DIFF_ARGS}
    with tf.GradientTape() as tape:
        tape.watch(list(tensors.values()))
        h, c = sru_recurrence(**{**args, **tensors})
        loss = tf.reduce_sum(h * arrays["w_h"]) + tf.reduce_sum(c * arrays["w_c"])
    grads = tape.gradient(loss, list(tensors.values()))
    expected = {"tf/h": h.numpy(), "tf/c": c.numpy()}
    expected.update({f"tf/d{key}": g.numpy() for key, g in zip(DIFF_ARGS, grads)})
    return arrays, expected


def _tf_model(rng):
    """The SRU++ encoder on TensorFlow: weights, inputs, predictions, weights after one SGD step."""
    import keras

    from gau_keras import build_transformer_model

    model = build_transformer_model(**MODEL)
    for weight in model.weights:  # alpha starts at 0, which would keep the attention out of the output
        if weight.name == "alpha":
            weight.assign([0.5])
    tokens = rng.integers(1, MODEL["vocab_size"], size=(2, 7))
    tokens[1, 5:] = 0
    targets = rng.normal(size=(2, 7, 2 * MODEL["hidden_size"]))
    arrays = {f"weight/{i}": w for i, w in enumerate(model.get_weights())}
    arrays.update(tokens=tokens, targets=targets)
    expected = {"predict": model.predict(tokens, verbose=0)}
    model.compile(keras.optimizers.SGD(0.5), "mse")
    expected["loss"] = np.asarray(model.train_on_batch(tokens, targets))
    expected.update({f"trained/{i}": w for i, w in enumerate(model.get_weights())})
    return arrays, expected


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory, requires_jax):
    """(inputs, TensorFlow's results, the JAX process's arrays, its plain results)."""
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("compares the JAX process with TensorFlow in this one: run with KERAS_BACKEND=tensorflow")
    rng = np.random.default_rng(1234)
    inputs, expected = {}, {}
    for i, case in enumerate(CASES):
        arrays, tf_results = _tf_recurrence(rng, case)
        inputs.update({f"case{i}/{k}": v for k, v in arrays.items()})
        expected.update({f"case{i}/{k}": v for k, v in tf_results.items()})
    arrays, tf_results = _tf_model(rng)
    inputs.update({f"model/{k}": v for k, v in arrays.items()})
    expected.update(tf_results)
    folder = tmp_path_factory.mktemp("jax")
    paths = [folder / "inputs.npz", folder / "outputs.npz", folder / "results.json"]
    np.savez(paths[0], **inputs)
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    env.pop("GAU_KERAS_SRU_KERNEL", None)
    result = subprocess.run(
        [sys.executable, "-c", JAX_RUN, *map(str, paths)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return inputs, expected, dict(np.load(paths[1])), json.loads(paths[2].read_text())


@pytest.mark.parametrize("i", range(len(CASES)), ids=CASE_IDS)
def test_forward_equals_tensorflow_and_autodiff_reference(jax_run, i):
    _, expected, got, _ = jax_run
    for name in ("h", "c"):
        tf_value = expected[f"case{i}/tf/{name}"]
        assert got[f"case{i}/jax/{name}"].dtype == np.float64
        np.testing.assert_allclose(got[f"case{i}/jax/{name}"], tf_value, rtol=1e-10, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(
            got[f"case{i}/autodiff/{name}"], tf_value, rtol=1e-10, atol=1e-12, err_msg=f"autodiff {name}"
        )


@pytest.mark.parametrize("i", range(len(CASES)), ids=CASE_IDS)
def test_gradients_equal_autodiff_and_tensorflow(jax_run, i):
    inputs, expected, got, _ = jax_run
    for key in DIFF_ARGS:
        ours, reference = got[f"case{i}/jax/d{key}"], got[f"case{i}/autodiff/d{key}"]
        assert ours.shape == inputs[f"case{i}/{key}"].shape, key
        if key in ("x", "scale_x") and CASES[i]["k"] == 4:  # unused: U carries the skip term
            assert not np.any(ours) and not np.any(reference) and not np.any(expected[f"case{i}/tf/d{key}"])
            continue
        assert np.abs(reference).max() > 1e-3, f"d{key}: the reference gradient vanishes, nothing is compared"
        np.testing.assert_allclose(
            ours, reference, rtol=1e-6, atol=1e-6 * np.abs(reference).max(), err_msg=f"d{key} vs autodiff"
        )
        np.testing.assert_allclose(
            ours, expected[f"case{i}/tf/d{key}"], rtol=1e-9, atol=1e-12, err_msg=f"d{key} vs TensorFlow"
        )


def test_jit_eval_shape_half_precision_and_errors(jax_run):
    contract = jax_run[3]["contract"]
    assert contract["kernel_choice"] == "scan"  # "auto" on a CPU
    assert contract["eval_shape"] == [[[2, 5, 6], "float32"], [[2, 6], "float32"]]
    for dtype, tol in (("float16", 1e-2), ("bfloat16", 4e-2)):
        assert contract[dtype]["dtypes"] == [dtype, dtype]
        assert contract[dtype]["error"] < tol  # computed in float32: only the output's rounding
        assert contract[dtype]["vs_float32_inputs"] > 0  # the inputs really were rounded to half precision
    errors = contract["errors"]
    assert "weight_c must be" in errors["weight_c"]
    assert "mask_pad must be [B, L]" in errors["mask_pad"]
    assert "scale_x must hold one value" in errors["scale_x"]
    assert "TensorFlow's C++ kernel" in errors["native"]


def test_tensorflow_recurrence_is_not_imported_under_jax(jax_run):
    assert jax_run[3]["tf_modules_loaded"] == []


def test_srupp_model_predicts_and_trains_as_on_tensorflow(jax_run):
    inputs, expected, got, _ = jax_run
    np.testing.assert_allclose(got["predict"], expected["predict"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)
    count, moved = sum(k.startswith("model/weight/") for k in inputs), 0
    for i in range(count):
        before, want = inputs[f"model/weight/{i}"], expected[f"trained/{i}"]
        moved += not np.allclose(want, before)
        np.testing.assert_allclose(
            got[f"trained/{i}"],
            want,
            rtol=1e-5,
            atol=1e-5 * np.abs(want).max(),
            err_msg=f"weight {i} after one SGD step",
        )
    assert moved == count  # the step changed every weight


@pytest.mark.parametrize("name", PARITY_IDS)
def test_official_srupp_parity_under_jax(jax_run, name):
    parity = jax_run[3]["parity"]
    assert parity[name] is None, parity[name]
