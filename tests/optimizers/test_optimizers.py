"""LAMB and PiecewiseLinearDecay against numpy versions of docs/pretraining.md's equations.

The extend_with_* factories against the original bert4keras: test_optimizers_bert4keras.py;
their serialisation, model.fit and EMA: test_optimizers_extensions.py.
"""

import json

import keras
import numpy as np
import pytest

from gau_keras.optimizers import LAMB, PiecewiseLinearDecay

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

B1, B2 = 0.9, 0.999


def reference_lamb(weights, grad_steps, lrs, *, eps=1e-6, wd=0.0, bias_correction=False, no_decay=(), no_adapt=()):
    """Plain numpy LAMB: `weights` {name: array}, one {name: grad} dict and one lr per update."""
    w = {k: v.astype(np.float64).copy() for k, v in weights.items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v2 = {k: np.zeros_like(v) for k, v in w.items()}
    for t, (grads, lr) in enumerate(zip(grad_steps, lrs), start=1):
        for k in w:
            g = grads[k].astype(np.float64)
            m[k] = B1 * m[k] + (1 - B1) * g
            v2[k] = B2 * v2[k] + (1 - B2) * g * g
            mh, vh = m[k], v2[k]
            if bias_correction:
                mh, vh = mh / (1 - B1**t), vh / (1 - B2**t)
            u = mh / (np.sqrt(vh) + eps)
            if k not in no_decay:
                u = u + wd * w[k]
            # bert4keras's layer adaptation recovers u from the update Δ = −lr·u as
            # Δ / max(lr, 1e-7) (the same u unless lr < 1e-7), ratio 1 if a norm is 0.
            wn, un = np.linalg.norm(w[k]), np.linalg.norm(lr * u / max(lr, 1e-7))
            ratio = wn / un if (wn > 0 and un > 0 and k not in no_adapt) else 1.0
            w[k] = w[k] - lr * ratio * u
    return w


def tiny_variables():
    """Variables with bert4keras-like paths: a Dense (kernel + zero bias) and a '-Norm' layer."""
    dense = keras.layers.Dense(4, name="Transformer-0-FeedForward")
    norm = keras.layers.LayerNormalization(name="Transformer-0-FeedForward-Norm")
    dense.build((None, 3))
    norm.build((None, 4))
    variables = dense.trainable_variables + norm.trainable_variables
    return {v.path: v for v in variables}


def random_grads(rng, variables, n):
    return [{k: rng.normal(size=v.shape).astype("float32") for k, v in variables.items()} for _ in range(n)]


def run_lamb(optimizer, variables, grad_steps):
    names = list(variables)
    for grads in grad_steps:
        optimizer.apply([grads[k] for k in names], [variables[k] for k in names])
    return {k: variables[k].numpy() for k in names}


@pytest.mark.parametrize("bias_correction", [False, True])
def test_lamb_matches_numpy_with_exclusions(rng, bias_correction):
    variables = tiny_variables()
    assert set(variables) == {
        "Transformer-0-FeedForward/kernel",
        "Transformer-0-FeedForward/bias",
        "Transformer-0-FeedForward-Norm/gamma",
        "Transformer-0-FeedForward-Norm/beta",
    }
    start = {k: v.numpy() for k, v in variables.items()}
    grads = random_grads(rng, variables, 5)
    opt = LAMB(
        0.01,
        weight_decay_rate=0.1,
        bias_correction=bias_correction,
        exclude_from_weight_decay=["Norm", "bias"],
        exclude_from_layer_adaptation=["gamma$"],
    )
    got = run_lamb(opt, variables, grads)
    want = reference_lamb(
        start,
        grads,
        [0.01] * 5,
        wd=0.1,
        bias_correction=bias_correction,
        no_decay={k for k in start if "Norm" in k or "bias" in k},
        no_adapt={"Transformer-0-FeedForward-Norm/gamma"},
    )
    for k in start:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_exclusions_change_the_update(rng):
    """Guards the test above: without exclusions the same steps give other weights."""
    variables = tiny_variables()
    start = {k: v.numpy() for k, v in variables.items()}
    grads = random_grads(rng, variables, 3)
    got = run_lamb(LAMB(0.01, weight_decay_rate=0.1), variables, grads)
    excluded = reference_lamb(start, grads, [0.01] * 3, wd=0.1, no_decay=set(start), no_adapt=set(start))
    plain = reference_lamb(start, grads, [0.01] * 3, wd=0.1)
    kernel = "Transformer-0-FeedForward/kernel"
    np.testing.assert_allclose(got[kernel], plain[kernel], rtol=1e-5, atol=1e-6)
    assert np.abs(got[kernel] - excluded[kernel]).max() > 1e-4


def test_lamb_follows_the_schedule(rng):
    variables = tiny_variables()
    start = {k: v.numpy() for k, v in variables.items()}
    grads = random_grads(rng, variables, 6)
    schedule = {2: 1.0, 4: 0.5}
    opt = LAMB(PiecewiseLinearDecay(0.02, schedule), weight_decay_rate=0.01, exclude_from_weight_decay=["Norm", "bias"])
    got = run_lamb(opt, variables, grads)
    lrs = 0.02 * np.interp(np.arange(6), [0, 2, 4], [0.0, 1.0, 0.5])
    want = reference_lamb(start, grads, lrs, wd=0.01, no_decay={k for k in start if "Norm" in k or "bias" in k})
    for k in start:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_gradient_accumulation_is_one_update_with_the_mean_gradient(rng):
    variables = tiny_variables()
    names = list(variables)
    start = {k: v.numpy() for k, v in variables.items()}
    micro = random_grads(rng, variables, 4)
    opt = LAMB(
        PiecewiseLinearDecay(0.05, {0: 1.0, 1: 0.5, 2: 0.25}), weight_decay_rate=0.01, gradient_accumulation_steps=2
    )
    opt.apply([micro[0][k] for k in names], [variables[k] for k in names])
    for k in names:  # the first micro-step only accumulates
        np.testing.assert_array_equal(variables[k].numpy(), start[k])
    for grads in micro[1:]:
        opt.apply([grads[k] for k in names], [variables[k] for k in names])
    assert int(opt.iterations) == 2
    mean = [{k: (micro[i][k] + micro[i + 1][k]) / 2 for k in names} for i in (0, 2)]
    # Updates 0 and 1 use s(0) = 1 and s(1) = 0.5: the schedule counts updates.
    want = reference_lamb(start, mean, [0.05, 0.025], wd=0.01)
    for k in names:
        np.testing.assert_allclose(variables[k].numpy(), want[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize(
    "step, expected",
    [
        (0, 0.0),
        (500, 0.5),
        (1000, 1.0),
        (1500, 0.55),
        (2000, 0.1),
        (10**6, 0.1),
    ],
)
def test_piecewise_linear_warmup_then_decay(step, expected):
    schedule = PiecewiseLinearDecay(2.0, {1000: 1, 2000: 0.1})
    assert float(schedule(step)) == pytest.approx(2.0 * expected, rel=1e-6)


def test_piecewise_linear_gau_alpha_recipe_and_string_keys():
    recipe = {"0": 1, "160000": 0.5, "640000": 0.1, "1280000": 0.01}
    schedule = PiecewiseLinearDecay(1.76e-3, recipe)
    steps = np.array([0, 80000, 160000, 400000, 640000, 960000, 1280000, 2000000])
    expected = 1.76e-3 * np.interp(steps, [0, 160000, 640000, 1280000], [1, 0.5, 0.1, 0.01])
    got = np.array([float(schedule(s)) for s in steps])
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_piecewise_linear_without_from_zero_is_constant_before_first_knot():
    schedule = PiecewiseLinearDecay(1.0, {10: 0.5, 20: 1.0}, from_zero=False)
    assert [float(schedule(s)) for s in (0, 10, 15, 30)] == pytest.approx([0.5, 0.5, 0.75, 1.0])


@pytest.mark.parametrize(
    "bad, message",
    [
        ({}, "non-empty"),
        ({"ten": 1}, "'ten'"),
        ({-1: 1}, "non-negative"),
        ({"5": 1, 5: 2}, "twice"),
        ({1: "x"}, "not a number"),
    ],
)
def test_piecewise_linear_rejects_bad_schedules(bad, message):
    with pytest.raises(ValueError, match=message):
        PiecewiseLinearDecay(1.0, bad)


@pytest.mark.float64
def test_tiny_learning_rate_floors_the_recovered_update_at_1e_7(rng):
    """lr < 1e-7: the trust ratio divides the update by 1e-7, not lr (bert4keras), a 100x larger step here."""
    import keras

    start = rng.normal(size=(4, 3))
    variable = keras.Variable(start, dtype="float64", name="w")
    grad = rng.normal(size=(4, 3))
    LAMB(1e-9, weight_decay_rate=0.1).apply([grad], [variable])
    want = reference_lamb({"w": start}, [{"w": grad}], [1e-9], wd=0.1)["w"]
    u = (0.1 * grad) / (np.sqrt(0.001 * grad * grad) + 1e-6) + 0.1 * start
    naive = start - 1e-9 * np.linalg.norm(start) / np.linalg.norm(u) * u
    np.testing.assert_allclose(variable.numpy() - start, want - start, rtol=1e-6)
    np.testing.assert_allclose(want - start, 100 * (naive - start), rtol=1e-5)


def test_weight_decay_argument_is_rejected():
    with pytest.raises(ValueError, match="weight_decay_rate"):
        LAMB(weight_decay=0.01)


def test_exclude_from_weight_decay_method(rng):
    variables = tiny_variables()
    start = {k: v.numpy() for k, v in variables.items()}
    grads = random_grads(rng, variables, 2)
    opt = LAMB(0.01, weight_decay_rate=0.5)
    opt.exclude_from_weight_decay(var_names=["kernel"])
    got = run_lamb(opt, variables, grads)
    want = reference_lamb(start, grads, [0.01] * 2, wd=0.5, no_decay={"Transformer-0-FeedForward/kernel"})
    for k in start:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_config_round_trip_through_json():
    opt = LAMB(
        PiecewiseLinearDecay(1e-3, {100: 1, 200: 0.1}, from_zero=True),
        weight_decay_rate=0.01,
        bias_correction=True,
        exclude_from_weight_decay=["Norm", "bias"],
        exclude_from_layer_adaptation=["Embedding"],
        gradient_accumulation_steps=4,
        global_clipnorm=1.0,
    )
    restored = keras.optimizers.deserialize(json.loads(json.dumps(keras.optimizers.serialize(opt))))
    assert isinstance(restored, LAMB)
    config, restored_config = opt.get_config(), restored.get_config()
    assert restored_config == config
    assert config["exclude_from_weight_decay"] == ["Norm", "bias"]
    assert config["gradient_accumulation_steps"] == 4
    assert "weight_decay" not in config
    for step in (0, 50, 150, 300):
        assert float(restored._learning_rate(step)) == pytest.approx(float(opt._learning_rate(step)))


def test_keras_model_round_trip_keeps_optimizer_state(tmp_path, rng):
    x = rng.normal(size=(8, 3)).astype("float32")
    y = rng.normal(size=(8, 2)).astype("float32")

    def make():
        inputs = keras.Input((3,))
        hidden = keras.layers.Dense(4, name="Encoder-Dense")(inputs)
        hidden = keras.layers.LayerNormalization(name="Encoder-Norm")(hidden)
        model = keras.Model(inputs, keras.layers.Dense(2, name="Output")(hidden))
        model.compile(
            optimizer=LAMB(
                PiecewiseLinearDecay(0.01, {2: 1.0}), weight_decay_rate=0.01, exclude_from_weight_decay=["Norm", "bias"]
            ),
            loss="mse",
        )
        return model

    model = make()
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    assert int(loaded.optimizer.iterations) == 2
    for a, b in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    loaded.fit(x, y, batch_size=8, epochs=1, verbose=0)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7, err_msg=a.path)


@pytest.mark.tensorflow_only  # tf.IndexedSlices
def test_sparse_gradients_with_repeated_rows(rng):
    """Embedding gradients arrive as IndexedSlices (TF), possibly repeating rows."""
    import tensorflow as tf

    table = keras.Variable(rng.normal(size=(5, 3)).astype("float32"), name="table")
    start = table.numpy()
    rows = rng.normal(size=(3, 3)).astype("float32")
    indices = np.array([1, 3, 1])
    dense = np.zeros((5, 3), "float32")
    np.add.at(dense, indices, rows)
    opt = LAMB(0.01, weight_decay_rate=0.1)
    opt.apply([tf.IndexedSlices(rows, indices, dense_shape=(5, 3))], [table])
    want = reference_lamb({"t": start}, [{"t": dense}], [0.01], wd=0.1)["t"]
    np.testing.assert_allclose(table.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.tensorflow_only  # tf.IndexedSlices
def test_dense_adamw_updates_repeated_rows_as_a_dense_gradient(rng):
    """Keras 3's AdamW squares an IndexedSlices gradient's slices before summing the rows that
    repeat; DenseAdamW (the fine-tuning runner's) gives the dense gradient's update, as on JAX."""
    import tensorflow as tf

    from gau_keras.optimizers import DenseAdamW

    start = rng.normal(size=(5, 3)).astype("float32")
    rows, indices = rng.normal(size=(3, 3)).astype("float32"), np.array([1, 3, 1])
    dense = np.zeros((5, 3), "float32")
    np.add.at(dense, indices, rows)
    tables = []
    for gradient in (tf.IndexedSlices(rows, indices, dense_shape=(5, 3)), tf.constant(dense)):
        table, opt = keras.Variable(start), DenseAdamW(0.1, weight_decay=0.01)
        for _ in range(3):
            opt.apply([gradient], [table])
        tables.append(table.numpy())
    assert np.abs(tables[1] - start)[1].min() > 0.1  # the repeated row moved
    np.testing.assert_allclose(tables[0], tables[1], rtol=1e-6, atol=1e-7)
    restored = keras.optimizers.deserialize(json.loads(json.dumps(keras.optimizers.serialize(opt))))
    assert isinstance(restored, DenseAdamW) and restored.get_config() == opt.get_config()


DISTRIBUTED_SCRIPT = """'''MirroredStrategy over 2 logical CPUs vs no strategy: LAMB with Keras's accumulation,
and GAU-alpha's bert4keras chain (delayed accumulation) under model.fit.'''
import sys
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from gau_keras.optimizers import (LAMB, Adam, PiecewiseLinearDecay, extend_with_gradient_accumulation,
                                  extend_with_layer_adaptation, extend_with_piecewise_linear_lr,
                                  extend_with_weight_decay)

AdamW = extend_with_weight_decay(Adam, "AdamW")
LAMBLRG = extend_with_gradient_accumulation(extend_with_piecewise_linear_lr(extend_with_layer_adaptation(AdamW)),
                                            "LAMBLRG")
OPTIMIZERS = {
    "lamb": lambda: LAMB(PiecewiseLinearDecay(0.05, {1: 1.0, 3: 0.5}), weight_decay_rate=0.01,
                         exclude_from_weight_decay=["Norm", "bias"], gradient_accumulation_steps=2),
    "chain": lambda: LAMBLRG(learning_rate=0.05, bias_correction=False, weight_decay_rate=0.01,
                             exclude_from_weight_decay=["Norm", "bias"], grad_accum_steps=2,
                             lr_schedule={1: 1.0, 3: 0.5}),
}

def run(strategy, kind):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        inp = keras.Input((3,)); h = keras.layers.Dense(4, name="Encoder-Dense")(inp)
        h = keras.layers.LayerNormalization(name="Encoder-Norm")(h)
        m = keras.Model(inp, keras.layers.Dense(2, name="Out")(h))
        m.compile(optimizer=OPTIMIZERS[kind](), loss="mse", jit_compile=False)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 3)).astype("float32"); y = rng.normal(size=(40, 2)).astype("float32")
    start = [w.numpy() for w in m.weights]
    m.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    moved = max(float(np.abs(a - w.numpy()).max()) for a, w in zip(start, m.weights))
    assert moved > 1e-3, (kind, moved)
    return [w.numpy() for w in m.weights], int(m.optimizer.iterations.numpy())

ok = True
for kind, want_iterations in (("lamb", 2), ("chain", 5)):
    plain, it1 = run(tf.distribute.get_strategy(), kind)
    mirrored, it2 = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), kind)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(plain, mirrored))
    print(kind, "iterations", it1, it2, "max|diff|", diff)
    ok = ok and it1 == it2 == want_iterations and diff < 1e-5
sys.exit(0 if ok else 1)
"""


@pytest.mark.tensorflow_only  # tf.distribute.MirroredStrategy
def test_accumulation_inside_a_distribution_strategy(tmp_path):
    """Two logical CPUs under MirroredStrategy give the single-device result (LAMB, GAU-α's chain).

    Runs in a fresh interpreter: logical devices must be set before TF starts.
    XLA is off: it cannot address a second logical CPU's variables (Keras's
    Adam fails the same way there), which says nothing about GPUs/TPUs.
    """
    import os
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "distributed.py"
    script.write_text(DISTRIBUTED_SCRIPT)
    repo = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "lamb iterations 2 2" in result.stdout and "chain iterations 5 5" in result.stdout
