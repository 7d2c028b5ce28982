"""The Loss layer: a model compiled with no loss trains on it, add_metric shows
in fit's history (reset every epoch), predict works, masks and output_axis."""

import keras
import numpy as np
import pytest
from keras import ops

from gau_keras.backend.keras.models import Model
from gau_keras.layers import Embedding, Loss
from tests.harness import PADDING, floats, run_layer_test
from tests.layer_utils import MeanLoss, assert_keras_round_trip

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


@keras.saving.register_keras_serializable(package="tests")
class SquaredError(Loss):
    """MSE of inputs [y_true, y_pred], with two metrics."""

    def compute_loss(self, inputs, mask=None):
        y_true, y_pred = inputs
        self.add_metric(ops.mean(ops.abs(y_true - y_pred)), name="mae")
        self.add_metric(ops.ones(()), name="steps", aggregation="mean")
        return ops.mean(ops.square(y_true - y_pred))


def _regression(rng):
    x, y = keras.Input((3,)), keras.Input((1,))
    prediction = keras.layers.Dense(1)(x)
    layer = SquaredError(1)
    model = Model([x, y], layer([y, prediction]))  # the face's: on JAX it adds add_metric's values
    data = rng.normal(size=(64, 3)).astype("float32")
    return model, layer, [data, data @ np.array([[1.0], [-2.0], [0.5]], "float32")]


def test_trains_on_its_loss_and_reports_its_metrics(rng):
    model, layer, data = _regression(rng)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    history = model.fit(data, None, epochs=3, batch_size=16, verbose=0).history
    assert set(history) == {"loss", "mae", "steps"}
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert history["mae"][-1] < history["mae"][0]
    # the tracker was reset at each epoch: it holds the last epoch's 4 batches only
    steps = next(m for m in layer.metrics if m.name == "steps")
    assert float(steps.count) == 4 and history["steps"] == [1.0, 1.0, 1.0]
    assert model.evaluate(data, verbose=0, return_dict=True)["mae"] == pytest.approx(
        float(np.mean(np.abs(model.predict(data, verbose=0) - data[1]))), rel=1e-4
    )


def test_predict_returns_the_selected_input(rng):
    model, _, data = _regression(rng)
    dense = model.layers[1] if isinstance(model.layers[1], keras.layers.Dense) else model.layers[2]
    expected = data[0] @ keras.ops.convert_to_numpy(dense.kernel) + keras.ops.convert_to_numpy(dense.bias)
    np.testing.assert_allclose(model.predict(data, verbose=0), expected, rtol=1e-5, atol=1e-6)


class MaskedMean(Loss):
    """Mean of x over its valid positions; records what mask it was given."""

    def compute_loss(self, inputs, mask=None):
        self.seen_mask = mask
        x = inputs[0]
        keep = ops.ones_like(x[..., :1]) if mask is None else ops.cast(mask[0], x.dtype)[..., None]
        return ops.sum(x * keep) / ops.sum(keep)


def test_masks_and_output_axis_list():
    ids = keras.Input((None,), dtype="int32")
    plain = keras.Input((None, 2))
    x = Embedding(10, 2, mask_zero=True)(ids)
    layer = MaskedMean([0, 1])
    out = layer([x, plain])
    assert isinstance(out, list) and out[0]._keras_mask is not None and getattr(out[1], "_keras_mask", None) is None
    value = np.array([[1, 2, 0]])
    hidden = keras.ops.convert_to_numpy(Embedding(10, 2)(value))
    layer([hidden, hidden], mask=[np.array([[True, True, False]]), None])
    assert layer.seen_mask[1] is None and layer.losses
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.losses[0]), hidden[0, :2].sum() / 2, rtol=1e-6)
    layer([hidden, hidden])
    assert layer.seen_mask is None  # no input has a mask: None, as Keras 2 passed it


def test_round_trip_and_errors(rng):
    model, _, data = _regression(rng)
    restored = assert_keras_round_trip(model, data)
    assert restored.layers[-1].get_config()["output_axis"] == 1
    with pytest.raises(NotImplementedError, match="compute_loss"):
        Loss()([np.zeros((1, 2), "float32")])
    with pytest.raises(ValueError, match="output_axis"):
        Loss(output_axis="last")


MIRRORED = """
import numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tests.layers.test_loss import SquaredError
with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
    x, y = keras.Input((3,)), keras.Input((1,))
    model = keras.Model([x, y], SquaredError(1)([y, keras.layers.Dense(1)(x)]))
    model.compile(optimizer=keras.optimizers.SGD(0.1))
data = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
history = model.fit([data, data.sum(1, keepdims=True)], None, epochs=2, batch_size=8, verbose=0).history
assert sorted(history) == ["loss", "mae", "steps"] and history["steps"] == [1.0, 1.0], history
"""


@pytest.mark.tensorflow_only
def test_metrics_under_a_two_replica_mirrored_strategy():
    """Trackers made inside the training step (not at the symbolic call) fail with two replicas."""
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    result = subprocess.run(
        [sys.executable, "-c", MIRRORED], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]


#: fit / evaluate / predict of a Loss-layer model with two add_metric values, on the backend
#: the process was started with; prints its history and evaluation as JSON
BACKEND_RUN = """
import json
import keras
import numpy as np
from gau_keras.backend.keras.models import Model
from gau_keras.layers import Loss

class Doubled(Loss):
    def compute_loss(self, inputs, mask=None):
        y, p = inputs
        loss = keras.ops.mean((y - p) ** 2)
        self.add_metric(loss * 2, name="double")
        self.add_metric(keras.ops.max(p), name="largest")
        return loss

a, b = keras.Input((3,)), keras.Input((3,))
out = Doubled(1)([b, keras.layers.Dense(3, kernel_initializer="ones")(a)])
model = Model([a, b], out)
model.compile(keras.optimizers.SGD(0.01))
rng = np.random.default_rng(0)
data = [rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 3)).astype("float32")]
history = model.fit(data, None, batch_size=4, epochs=2, verbose=0, shuffle=False).history
evaluation = model.evaluate(data, None, batch_size=4, verbose=0, return_dict=True)
assert model.predict(data, verbose=0).shape == (8, 3)
print(json.dumps({"backend": keras.backend.backend(), "history": history, "evaluation": evaluation}))
"""


def test_add_metric_gives_the_same_logs_on_jax_as_on_tensorflow(requires_jax):
    """On JAX the metric values noted in the call are added where Keras maps the
    metrics' variables (compute_loss); the logs equal TensorFlow's."""
    import contextlib
    import io
    import json
    import os
    import subprocess
    import sys

    import keras

    logs = {}
    for backend in ("tensorflow", "jax"):
        if backend == keras.backend.backend():  # this process's backend: run here
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(BACKEND_RUN, {})
            stdout = printed.getvalue()
        else:
            result = subprocess.run(
                [sys.executable, "-c", BACKEND_RUN],
                capture_output=True,
                text=True,
                timeout=300,
                env=dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu"),
            )
            assert result.returncode == 0, result.stderr[-3000:]
            stdout = result.stdout
        logs[backend] = json.loads(stdout.strip().splitlines()[-1])
        assert logs[backend]["backend"] == backend
    tf_logs, jax_logs = logs["tensorflow"], logs["jax"]
    assert set(jax_logs["history"]) == {"loss", "double", "largest"}
    for name, values in tf_logs["history"].items():
        assert jax_logs["history"][name] == pytest.approx(values, rel=1e-5), name
    assert jax_logs["history"]["double"] == pytest.approx([2 * v for v in jax_logs["history"]["loss"]], rel=1e-6)
    assert jax_logs["evaluation"] == pytest.approx(tf_logs["evaluation"], rel=1e-5)


def test_loss_passes_the_layer_harness():
    """As MeanLoss: the registered Loss is abstract."""
    run_layer_test(MeanLoss, {}, floats(2, 5, 8), (2, 5, 8), input_mask=PADDING)
