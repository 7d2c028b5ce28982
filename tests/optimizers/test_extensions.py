"""The extend_with_* factories: classes, LAMB's identity, serialisation, model.fit, EMA, sparse gradients.

Their update rules are compared with the original bert4keras in test_optimizers_bert4keras.py.
"""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

from gau_keras.optimizers import (
    LAMB,
    Adam,
    extend_with_exponential_moving_average,
    extend_with_gradient_accumulation,
    extend_with_layer_adaptation,
    extend_with_lazy_optimization,
    extend_with_lookahead,
    extend_with_piecewise_linear_lr,
    extend_with_weight_decay,
)

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

REPO = pathlib.Path(__file__).resolve().parents[2]


def adamw_lr():
    return extend_with_piecewise_linear_lr(extend_with_weight_decay(Adam, "AdamW"), "AdamWLR")


def tiny_model(optimizer):
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, name="Encoder-Dense")(inputs)
    hidden = keras.layers.LayerNormalization(name="Encoder-Norm")(hidden)
    model = keras.Model(inputs, keras.layers.Dense(2, name="Output")(hidden))
    model.compile(optimizer=optimizer, loss="mse")
    return model


def tiny_data(rng, n=16):
    return rng.normal(size=(n, 3)).astype("float32"), rng.normal(size=(n, 2)).astype("float32")


def test_factories_name_cache_and_register_their_classes():
    AdamW = extend_with_weight_decay(Adam, "AdamW")
    assert AdamW is extend_with_weight_decay(Adam, "AdamW") and issubclass(AdamW, Adam)
    assert AdamW.__name__ == "AdamW"
    assert keras.saving.get_custom_objects()["gau_keras>AdamW"] is AdamW
    assert extend_with_weight_decay(Adam).__name__ == "Adam_weight_decay"
    assert extend_with_weight_decay(Adam) is not AdamW
    # GAU-α's train.py names its composition "LAMB": ours keeps that registered name.
    TrainPyLAMB = extend_with_layer_adaptation(AdamW, name="LAMB")
    assert TrainPyLAMB is not LAMB and keras.saving.get_custom_objects()["gau_keras>LAMB"] is LAMB
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(TrainPyLAMB(weight_decay_rate=0.2)))
    assert type(restored) is TrainPyLAMB and restored.weight_decay_rate == 0.2
    assert type(keras.optimizers.deserialize(keras.optimizers.serialize(LAMB()))) is LAMB


def test_lamb_is_the_composed_class(rng):
    Composed = extend_with_layer_adaptation(extend_with_weight_decay(Adam))
    assert issubclass(LAMB, Composed)
    values = rng.normal(size=(4, 3)).astype("float32")
    grads = rng.normal(size=(3, 4, 3)).astype("float32")
    results = []
    for optimizer in (
        LAMB(0.01, weight_decay_rate=0.1),
        Composed(learning_rate=0.01, weight_decay_rate=0.1, bias_correction=False),
    ):
        variable = keras.Variable(values, name="w")
        for grad in grads:
            optimizer.apply([grad], [variable])
        results.append(variable.numpy())
    np.testing.assert_array_equal(results[0], results[1])
    assert np.abs(results[0] - values).max() > 1e-3


def test_composed_config_round_trip_through_json():
    LAMBLRG = extend_with_gradient_accumulation(
        extend_with_piecewise_linear_lr(extend_with_layer_adaptation(extend_with_weight_decay(Adam))), "LAMBLRG"
    )
    opt = LAMBLRG(
        learning_rate=1.76e-3,
        bias_correction=False,
        weight_decay_rate=0.01,
        grad_accum_steps=4,
        exclude_from_weight_decay=["Norm", "bias"],
        lr_schedule={0: 1, 160000: 0.5},
    )
    payload = json.loads(json.dumps(keras.optimizers.serialize(opt)))
    assert payload["class_name"] == "LAMBLRG"
    restored = keras.optimizers.deserialize(payload)
    assert type(restored) is LAMBLRG
    assert restored.get_config() == opt.get_config()
    assert restored.grad_accum_steps == 4 and restored.lr_schedule == {0: 1.0, 160000: 0.5}
    assert restored.get_config()["exclude_from_weight_decay"] == ["Norm", "bias"]


FRESH_LOAD = """
import json, sys
import keras, numpy as np
import gau_keras.optimizers  # registers gau_keras's optimizers; no factory is called here
model = keras.models.load_model(sys.argv[1])
opt = model.optimizer
np.savez(sys.argv[2], *[keras.ops.convert_to_numpy(v) for v in opt.variables])
print(json.dumps({"class": type(opt).__name__, "mro": [c.__name__ for c in type(opt).__mro__][:3],
                  "iterations": int(opt.iterations), "weight_decay_rate": opt.weight_decay_rate}))
"""


def test_keras_file_with_a_composed_optimizer_loads_in_a_fresh_process(tmp_path, rng):
    x, y = tiny_data(rng)
    model = tiny_model(
        adamw_lr()(
            learning_rate=0.01, weight_decay_rate=0.05, lr_schedule={2: 1.0}, exclude_from_weight_decay=["Norm", "bias"]
        )
    )
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    path = tmp_path / "m.keras"
    model.save(path)

    script = tmp_path / "load.py"
    script.write_text(FRESH_LOAD)
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, str(script), str(path), str(tmp_path / "v.npz")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"class": "AdamWLR", "mro": ["AdamWLR", "AdamW", "Adam"], "iterations": 4, "weight_decay_rate": 0.05}
    with np.load(tmp_path / "v.npz") as saved:
        fresh = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    assert len(fresh) == len(model.optimizer.variables)
    for a, b in zip(model.optimizer.variables, fresh):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), b)

    # Here too, and training goes on identically from the saved state.
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer) is type(model.optimizer)
    # the same batch order for both (each fit's shuffle draws from the global generator)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    loaded.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7, err_msg=a.path)


def _synced(model):
    """``model`` with its variables holding the training state (JAX's fit keeps that state apart)."""
    if keras.backend.backend() == "jax":
        model.jax_state_sync()
    return model


def test_fit_with_delayed_accumulation_updates_every_kth_micro_step(rng):
    AdamG = extend_with_gradient_accumulation(Adam)
    x, y = tiny_data(rng, n=24)
    model = tiny_model(AdamG(learning_rate=0.05, grad_accum_steps=3))
    kernels = []
    callback = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: kernels.append(_synced(model).get_layer("Output").kernel.numpy())
    )
    start = model.get_layer("Output").kernel.numpy()
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    assert int(model.optimizer.iterations) == 6
    moved = [not np.array_equal(a, b) for a, b in zip([start] + kernels[:-1], kernels)]
    # micro-step 0 updates with a zero gradient (no move), 3 with the mean of 0..2; the rest wait.
    assert moved == [False, False, False, True, False, False]


def test_ema_apply_and_reset_after_fit(rng):
    AdamEMA = extend_with_exponential_moving_average(Adam, "AdamEMA")
    x, y = tiny_data(rng)
    model = tiny_model(AdamEMA(learning_rate=0.05, ema_momentum=0.5))
    history = []
    callback = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: history.append([w.numpy() for w in _synced(model).trainable_weights])
    )
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    trained = [w.numpy() for w in model.trainable_weights]
    average = [np.zeros_like(w) for w in trained]
    for weights in history:
        average = [0.5 * a + 0.5 * w for a, w in zip(average, weights)]
    steps = len(history)
    opt = model.optimizer
    opt.apply_ema_weights()
    for w, a in zip(model.trainable_weights, average):
        np.testing.assert_allclose(w.numpy(), a / (1 - 0.5**steps), rtol=1e-5, atol=1e-6)
    opt.reset_old_weights()
    for w, t in zip(model.trainable_weights, trained):
        np.testing.assert_array_equal(w.numpy(), t)
    opt.apply_ema_weights(bias_correction=False)
    for w, a in zip(model.trainable_weights, average):
        np.testing.assert_allclose(w.numpy(), a, rtol=1e-5, atol=1e-6)


def test_ema_errors_before_use():
    opt = extend_with_exponential_moving_average(Adam)()
    with pytest.raises(ValueError, match="apply_ema_weights"):
        opt.apply_ema_weights()
    with pytest.raises(ValueError, match="reset_old_weights"):
        opt.reset_old_weights()


@pytest.mark.tensorflow_only
def test_lazy_optimization_with_sparse_embedding_gradients(rng):
    """IndexedSlices (an Embedding's gradient under TF) update only the rows looked up."""
    import tensorflow as tf

    AdamLazy = extend_with_lazy_optimization(Adam)
    start = rng.normal(size=(6, 3)).astype("float32")
    with keras.name_scope("Embedding-Token"):
        table = keras.Variable(start, name="embeddings")
    opt = AdamLazy(learning_rate=0.1, include_in_lazy_optimization=["Embedding"])
    rows = rng.normal(size=(3, 3)).astype("float32")
    for indices in ([1, 4, 1], [4, 4, 0]):
        opt.apply([tf.IndexedSlices(rows, tf.constant(indices), dense_shape=(6, 3))], [table])
    changed = np.any(table.numpy() != start, axis=-1)
    assert changed.tolist() == [True, True, False, False, True, False]
    # Without the extension every row the first step touched keeps moving on its momentum.
    plain = keras.Variable(start, name="plain")
    opt = Adam(learning_rate=0.1)
    for indices in ([1, 4, 1], [4, 4, 0]):
        opt.apply([tf.IndexedSlices(rows, tf.constant(indices), dense_shape=(6, 3))], [plain])
    np.testing.assert_array_equal(plain.numpy()[[2, 3, 5]], start[[2, 3, 5]])
    assert not np.allclose(plain.numpy()[1], table.numpy()[1])


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: extend_with_weight_decay(object), TypeError, "BaseOptimizer"),
        (lambda: extend_with_weight_decay(keras.optimizers.Adam), TypeError, "BaseOptimizer"),
        (lambda: extend_with_weight_decay(Adam, "not a name"), ValueError, "`name`"),
        (lambda: extend_with_gradient_accumulation(Adam)(grad_accum_steps=0), ValueError, "grad_accum_steps"),
        (lambda: extend_with_piecewise_linear_lr(Adam)(lr_schedule={"x": 1}), ValueError, "'x'"),
        (
            lambda: extend_with_weight_decay(Adam)(exclude_from_weight_decay="Norm"),
            TypeError,
            "exclude_from_weight_decay",
        ),
        (lambda: extend_with_weight_decay(Adam)(weight_decay=0.1), ValueError, "weight_decay_rate"),
    ],
)
def test_bad_arguments_name_the_argument(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_adafactor_and_lion_chains_round_trip_through_json():
    from gau_keras.optimizers import AdaFactor, Lion, extend_with_lookahead

    for opt in (
        AdaFactor(learning_rate=None, beta1=0.9, exclude_from_parameter_scale=["bias"]),
        extend_with_lookahead(extend_with_exponential_moving_average(Lion), "LionEMALA")(
            1e-3, ema_momentum=0.9, steps_per_slow_update=3
        ),
    ):
        payload = json.loads(json.dumps(keras.optimizers.serialize(opt)))
        restored = keras.optimizers.deserialize(payload)
        assert type(restored) is type(opt) and restored.get_config() == opt.get_config()
    assert restored.ema_momentum == 0.9 and restored.steps_per_slow_update == 3
    assert AdaFactor(learning_rate=None).get_config()["learning_rate"] is None


# ---------------------------------------------------------------- bad arguments (issue 36)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: Adam(float("nan")), ValueError, "Adam: learning_rate must be a finite number >= 0, got nan"),
        (lambda: Adam(float("inf")), ValueError, "learning_rate must be a finite number >= 0, got inf"),
        (lambda: Adam(-1e-3), ValueError, "learning_rate must be a finite number >= 0"),
        (lambda: Adam("1e-3"), TypeError, "Adam: learning_rate must be a number or a schedule, got str"),
        (
            lambda: extend_with_weight_decay(Adam)(1e-3, weight_decay_rate=-0.01),
            ValueError,
            "weight_decay_rate must be a finite number >= 0, got -0.01",
        ),
        (
            lambda: extend_with_weight_decay(Adam)(1e-3, weight_decay_rate="0.01"),
            TypeError,
            "weight_decay_rate must be a number, got str",
        ),
        (
            lambda: extend_with_exponential_moving_average(Adam)(1e-3, ema_momentum=1.5),
            ValueError,
            r"ema_momentum must be a finite number in \[0, 1\], got 1.5",
        ),
        (
            lambda: extend_with_lookahead(Adam)(1e-3, steps_per_slow_update=0),
            ValueError,
            "steps_per_slow_update must be an integer >= 1, got 0",
        ),
        (
            lambda: extend_with_lookahead(Adam)(1e-3, slow_step_size=-0.5),
            ValueError,
            r"slow_step_size must be a finite number in \[0, 1\], got -0.5",
        ),
        (
            lambda: extend_with_weight_decay(extend_with_weight_decay(Adam)),
            ValueError,
            "Adam_weight_decay already applies weight decay",
        ),
        (lambda: extend_with_weight_decay(LAMB), ValueError, "LAMB already applies weight decay"),
    ],
)
def test_bad_optimizer_arguments_are_refused_where_given(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_a_schedule_is_still_a_learning_rate():
    schedule = keras.optimizers.schedules.ExponentialDecay(1e-3, 10, 0.9)
    assert np.isclose(float(keras.ops.convert_to_numpy(Adam(schedule).learning_rate)), 1e-3)
