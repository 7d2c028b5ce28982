"""gau_keras.bert4keras: the Keras 2 face (the ``keras`` of gau_keras.backend, its ``Model``,
whole-model files under bert4keras-era names, ``get_output_at``), and that Keras itself is
left as it is (issue 35, items 2 and 4). The scripts that use all this as users write it:
tests/bert4keras_scripts/ (keras2_calls, shared_layer_outputs, layer_surgery, unilm_seq2seq).
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest

from gau_keras.backend import K
from gau_keras.backend import keras as keras2
from gau_keras.bert4keras import PORTING, saving
from gau_keras.bert4keras.model import Model, as_arrays
from gau_keras.layers import Add, FeedForward
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.both_backends


def tiny_model(cls=Model):
    """Two float inputs → Add (ours) → FeedForward (ours) applied twice → softmax over 3."""
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    ff = FeedForward(8, name="shared")
    x = Add(name="add")([a, b])
    x = ff(ff(x))
    return cls([a, b], keras.layers.Dense(3, activation="softmax", name="out")(x))


def batch(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, 4)), rng.normal(size=(n, 4))], np.eye(3)[rng.integers(0, 3, n)]


# ---------------------------------------------------------------- Keras itself is not touched

PLAIN_RUN = textwrap.dedent("""
    import json, sys
    import numpy as np
    if sys.argv[1] != "without":
        import gau_keras, gau_keras.backend, gau_keras.layers, gau_keras.models  # noqa: F401
    import keras
    if sys.argv[1] == "with-compat-layers":     # changes nothing in keras.Model, on JAX too
        from gau_keras.layers import ConditionalRandomField, Loss
        class Mean(Loss):
            def compute_loss(self, inputs, mask=None):
                self.add_metric(keras.ops.mean(inputs), name="mean")
                return keras.ops.mean(inputs)
        inp = keras.Input((3,))
        keras.Model(inp, ConditionalRandomField()(Mean()(keras.layers.Dense(3)(inp))))
    keras.utils.set_random_seed(3)
    x = keras.Input((4,)); model = keras.Model(x, keras.layers.Dense(2, activation="softmax")(x))
    model.compile("adam", "categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.default_rng(0)
    data, target = rng.normal(size=(16, 4)), np.eye(2)[rng.integers(0, 2, 16)]
    logs = model.fit(data, target, batch_size=4, epochs=2, verbose=0).history
    print("RESULT " + json.dumps({"logs": logs, "type": type(model).__name__,
                                  "fit_generator": hasattr(model, "fit_generator"),
                                  "kld": hasattr(keras.losses, "kullback_leibler_divergence"),
                                  "get_output_at": hasattr(keras.layers.Dense, "get_output_at"),
                                  "methods": [getattr(keras.Model, name).__module__ for name in
                                              ("train_step", "test_step", "compute_metrics", "compute_loss")]}))
""")


def test_a_plain_keras_model_behaves_as_without_gau_keras():
    """Importing gau_keras changes nothing in Keras, nor does building a Loss or CRF layer (the JAX
    support of their metrics lives in the face's models, gau_keras.bert4keras.jax_training): a plain
    model still trains to the same losses and logs."""
    results = {}
    for flag in ("with", "without", "with-compat-layers"):
        run = subprocess.run(
            [sys.executable, "-c", PLAIN_RUN, flag], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT
        )
        assert run.returncode == 0, run.stderr[-3000:]
        results[flag] = json.loads(
            next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT ") :]
        )
    assert results["with"] == results["without"]
    compat = results.pop("with-compat-layers")
    assert compat["logs"] == results["without"]["logs"], (compat["logs"], results["without"]["logs"])
    assert compat["methods"] == results["without"]["methods"], compat["methods"]
    assert results["with"]["type"] == "Functional" and not results["with"]["fit_generator"]
    assert not results["with"]["kld"] and not results["with"]["get_output_at"]


def test_the_backend_keras_adds_keras2_names_without_changing_keras():
    assert keras2.layers is keras.layers and keras2.optimizers is keras.optimizers
    assert keras2.Model is Model and keras2.models.Model is Model and issubclass(Model, keras.Model)
    assert keras2.losses.kullback_leibler_divergence is keras.losses.kl_divergence
    assert keras2.losses.mse is keras.losses.mean_squared_error and keras2.losses.logcosh is keras.losses.log_cosh
    assert keras2.losses.cosine_proximity is keras.losses.cosine_similarity
    assert keras2.metrics.kullback_leibler_divergence is keras.metrics.kl_divergence
    assert keras2.losses.Loss is keras.losses.Loss and keras2.backend is K
    assert not hasattr(keras.losses, "kullback_leibler_divergence") and not hasattr(keras.Model, "fit_generator")
    with pytest.raises(AttributeError, match="gau_keras.backend.keras.losses.*no_such_loss"):
        keras2.losses.no_such_loss  # noqa: B018


def test_imports_from_keras_port_with_one_substitution():
    """README: `from keras.X import Y` → `from gau_keras.backend.keras.X import Y`."""
    from gau_keras.backend.keras.layers import Dense
    from gau_keras.backend.keras.losses import kullback_leibler_divergence
    from gau_keras.backend.keras.models import Model as Keras2Model
    from gau_keras.backend.keras.models import load_model

    assert Keras2Model is Model and load_model is saving.load_model and Dense is keras.layers.Dense
    assert kullback_leibler_divergence is keras.losses.kl_divergence


# ---------------------------------------------------------------- data as Keras 2 took it


def test_nested_lists_are_read_as_keras2_read_them():
    assert [a.shape for a in as_arrays([[[1, 2, 3]], [[0, 0, 1]]], 2)] == [(1, 3), (1, 3)]
    assert as_arrays([[1, 2], [3, 4]], 1).shape == (2, 2)
    arrays = [np.ones((2, 3)), np.zeros((2, 3))]
    assert all(a is b for a, b in zip(as_arrays(arrays, 2), arrays))  # arrays pass through untouched
    assert as_arrays({"a": [1]}, 2) == {"a": [1]}
    model = tiny_model()
    x, _ = batch(1)
    nested = model.predict([x[0].tolist(), x[1].tolist()], verbose=0)
    np.testing.assert_array_equal(nested, model.predict(x, verbose=0))
    plain = tiny_model(keras.Model)
    with pytest.raises(ValueError, match="Unrecognized data type"):  # Keras 3 itself refuses them
        plain.predict([x[0].tolist(), x[1].tolist()], verbose=0)


def test_y_true_meets_the_loss_in_the_outputs_dtype():
    seen = []

    def loss(y_true, y_pred):
        seen.append(keras.backend.standardize_dtype(y_true.dtype))
        return -K.sum(y_true * K.log(y_pred + K.epsilon()), axis=-1)

    model = tiny_model()
    model.compile(keras.optimizers.SGD(0.1), loss)
    x, y = batch()
    model.train_on_batch(x, y.astype("float64"))
    model.train_on_batch([a.tolist() for a in x], y.tolist())  # nested lists, numbers of float64
    assert seen and set(seen) == {"float32"}


def test_y_true_meets_a_metric_function_in_the_outputs_dtype():
    """A GlobalPointer-style F1 multiplies y_true by a float32 prediction; a generator's float64
    targets (sequence_padding's) reach it as float32, as in Keras 2; a plain keras.Model is unchanged."""

    def pointer_f1(y_true, y_pred):
        y_pred = K.cast(K.greater(y_pred, 0.3), K.floatx())
        return 2 * K.sum(y_true * y_pred) / (K.sum(y_true + y_pred) + K.epsilon())

    x, y = batch(8)

    def batches(inputs=list):
        while True:
            yield inputs(x), y.astype("float64")

    model = tiny_model()
    model.compile(keras.optimizers.SGD(0.1), "categorical_crossentropy", metrics=[pointer_f1])
    logs = model.fit(batches(), steps_per_epoch=2, epochs=1, verbose=0).history
    scores = model.evaluate(batches(), steps=1, verbose=0)
    assert np.isfinite(logs["pointer_f1"][0]) and np.isfinite(scores[1])
    seen = []
    plain = tiny_model(keras.Model)
    plain.compile(
        keras.optimizers.SGD(0.1),
        "categorical_crossentropy",
        metrics=[lambda t, p: seen.append(keras.backend.standardize_dtype(t.dtype)) or K.mean(p)],
    )
    plain.evaluate(batches(tuple), steps=1, verbose=0)
    assert set(seen) == {"float64" if keras.backend.backend() == "tensorflow" else "float32"}  # JAX: no x64


@pytest.mark.parametrize("label", [np.int64(1), np.int32(1), np.float32(1.0), np.bool_(True), 1])
def test_nested_lists_of_numpy_scalars_and_arrays_are_read_as_keras2_read_them(label):
    """model.predict([[token_ids], [segment_ids], [[label]]]) with the label a numpy scalar (an argmax)."""
    a, b, c = (keras.Input((None,), name="a"), keras.Input((None,), name="b"), keras.Input((1,), name="c"))
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Reshape((-1, 1))(Add()([a, b])))
    model = Model([a, b, c], keras.layers.Dense(2)(keras.layers.Concatenate()([pooled, c])))
    token_ids, segment_ids = [2, 5, 7], [0, 0, 1]
    expected = model.predict([np.array([token_ids]), np.array([segment_ids]), np.array([[float(label)]])], verbose=0)
    for x in (
        [[token_ids], [segment_ids], [[label]]],
        [[np.array(token_ids)], [np.int64(segment_ids)], [[label]]],  # mixed lists and arrays
        [np.array([token_ids]), [list(map(np.int64, segment_ids))], [np.array([label])]],
    ):
        np.testing.assert_allclose(model.predict(x, verbose=0), expected, rtol=1e-6)
        np.testing.assert_allclose(model.predict_on_batch(x), expected, rtol=1e-5)
    model.compile("sgd", "mse")
    model.train_on_batch([[token_ids], [segment_ids], [[label]]], [[np.float32(1), np.int64(0)]])


def test_generator_methods_equal_fit_evaluate_predict_and_warn_about_workers():
    x, y = batch(8)

    def batches():
        while True:
            for i in (0, 4):
                yield [x[0][i : i + 4], x[1][i : i + 4]], y[i : i + 4]

    results = []
    for keras2_call in (True, False):
        keras.utils.set_random_seed(5)
        model = tiny_model()
        model.compile(keras.optimizers.Adam(1e-2), "categorical_crossentropy")
        if keras2_call:
            logs = model.fit_generator(batches(), steps_per_epoch=2, epochs=2, verbose=0).history
            scores = model.evaluate_generator(batches(), steps=2)
            probas = model.predict_generator(batches(), steps=2)
        else:
            logs = model.fit(batches(), steps_per_epoch=2, epochs=2, verbose=0).history
            scores = model.evaluate(batches(), steps=2, verbose=0)
            probas = model.predict((b[0] for b in batches()), steps=2, verbose=0)
        results.append((logs["loss"], scores, probas))
    (l2, s2, p2), (l3, s3, p3) = results
    np.testing.assert_allclose(l2, l3, rtol=1e-6)
    np.testing.assert_allclose(s2, s3, rtol=1e-6)
    np.testing.assert_allclose(p2, p3, rtol=1e-6)
    with pytest.warns(UserWarning, match=r"fit_generator: \{'workers': 4\} not used"):
        model.fit_generator(batches(), steps_per_epoch=1, verbose=0, workers=4)


# ---------------------------------------------------------------- whole-model files


@pytest.mark.parametrize("name", ["best_model.model", "model.h5", "model.keras"])
def test_save_and_load_under_bert4keras_era_names(tmp_path, name):
    model = tiny_model()
    model.compile(keras.optimizers.Adam(1e-2), "categorical_crossentropy")
    x, y = batch()
    model.train_on_batch(x, y)
    path = tmp_path / name
    model.save(str(path))
    assert saving.is_keras_file(str(path)) and not [p for p in os.listdir(tmp_path) if p.startswith(".partial")]
    again = keras2.models.load_model(str(path))
    assert type(again) is Model and again.optimizer.iterations.numpy() == 1
    np.testing.assert_array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0))


def test_an_empty_or_truncated_model_file_is_named_as_such(tmp_path):
    """Keras says "File not found" of an empty .keras file; load_model names the file and what is wrong."""
    model = tiny_model()
    model.save(str(tmp_path / "whole.keras"))
    data = (tmp_path / "whole.keras").read_bytes()
    (tmp_path / "empty.keras").write_bytes(b"")
    (tmp_path / "best_model.model").write_bytes(b"")
    (tmp_path / "half.keras").write_bytes(data[: len(data) // 2])
    for name, problem in (
        ("empty.keras", "the file is empty"),
        ("best_model.model", "the file is empty"),
        ("half.keras", ""),
    ):
        path = str(tmp_path / name)
        with pytest.raises(ValueError, match=f"load_model: {path} is not a .keras archive, or truncated.*{problem}"):
            keras2.models.load_model(path)
    with pytest.raises(FileNotFoundError, match="load_model: .*absent.keras: no such file"):
        keras2.models.load_model(str(tmp_path / "absent.keras"))


def test_save_options_of_keras2(tmp_path):
    model = tiny_model()
    model.compile(keras.optimizers.Adam(1e-2), "categorical_crossentropy")
    model.train_on_batch(*batch())
    model.save(str(tmp_path / "no_optimizer.model"), include_optimizer=False)
    again = keras2.models.load_model(str(tmp_path / "no_optimizer.model"))
    assert not again.compiled and model.compiled and model.optimizer.iterations.numpy() == 1
    with pytest.warns(UserWarning, match="save_format='h5' does not exist in Keras 3"):
        model.save(str(tmp_path / "legacy.h5"), save_format="h5")
    assert saving.is_keras_file(str(tmp_path / "legacy.h5"))
    with pytest.raises(FileExistsError, match="legacy.h5.*overwrite=False"):
        model.save(str(tmp_path / "legacy.h5"), overwrite=False)


def test_weights_under_bert4keras_era_names_and_keras2_files(tmp_path):
    import h5py
    from keras.src.legacy.saving import legacy_h5_format  # to write a file as Keras 2 wrote it

    model = tiny_model()
    model.save_weights(str(tmp_path / "best_model.weights"))  # bert4keras's examples' name
    other = tiny_model()
    other.load_weights(str(tmp_path / "best_model.weights"))
    for a, b in zip(other.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    with h5py.File(tmp_path / "keras2.weights", "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, model)
    third = tiny_model()
    third.load_weights(str(tmp_path / "keras2.weights"))
    np.testing.assert_array_equal(third.get_weights()[0], model.get_weights()[0])
    with pytest.raises(ValueError, match=r"by_name=True\): Keras 3 loads weights by layer structure only"):
        third.load_weights(str(tmp_path / "keras2.weights"), by_name=True)
    other.save_weights(str(tmp_path / "best_model.h5"))  # an .h5 name, Keras 3's weights inside
    third.load_weights(str(tmp_path / "best_model.h5"))
    np.testing.assert_array_equal(third.get_weights()[-1], other.get_weights()[-1])
    assert sorted(os.listdir(tmp_path)) == ["best_model.h5", "best_model.weights", "keras2.weights"]
    with pytest.raises(FileNotFoundError, match="load_weights: .*best_theseus.weights' does not exist"):
        third.load_weights(str(tmp_path / "best_theseus.weights"))


# ---------------------------------------------------------------- layers' calls


def test_get_output_at_on_a_layer_applied_twice():
    model = tiny_model()
    shared = model.get_layer("shared")
    assert len(shared._inbound_nodes) == 2
    first, second = shared.get_output_at(0), shared.get_output_at(1)
    assert shared.get_input_at(1) is first
    assert shared.get_output_at(-1) is second is shared._inbound_nodes[-1].output_tensors[0]
    assert shared.get_input_shape_at(0) == (None, 4) and shared.get_output_shape_at(1) == (None, 4)
    assert model.get_layer("add").get_input_shape_at(0) == [(None, 4), (None, 4)]
    with pytest.raises(ValueError, match="'shared': node_index=2 is not one of its 2 call"):
        shared.get_output_at(2)
    with pytest.raises(ValueError, match="has not been called on a tensor yet"):
        FeedForward(4).get_output_at(0)


# ---------------------------------------------------------------- what Keras 3 cannot do


def test_keras2_training_internals_name_the_porting_section():
    model = tiny_model()
    model.compile("adam", "categorical_crossentropy")
    with pytest.raises(NotImplementedError, match="train_step") as error:
        model._make_train_function()
    assert PORTING in str(error.value)
    with pytest.raises(NotImplementedError, match="model.total_loss"):
        model.total_loss  # noqa: B018
    assert not hasattr(model, "total_loss")  # an AttributeError too

    def train_function(inputs):  # a user's replacement, as bert4keras's adversarial example writes it
        return inputs

    with pytest.raises(NotImplementedError, match="would be ignored by Keras 3's fit"):
        model.train_function = train_function
    model.train_on_batch(*batch())  # Keras's own train_function is still made and used
    with pytest.raises(RuntimeError, match="no global learning phase.*Porting from bert4keras"):
        K.set_learning_phase(0)
    with pytest.raises(RuntimeError, match="Porting from bert4keras"):
        K.gradients(K.constant(1.0), [K.variable(1.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.train_function = None  # Keras resets it this way: allowed


def _masked_model():
    tokens = keras.Input((10,))
    hidden = keras.layers.Embedding(20, 4, mask_zero=True)(tokens)
    return Model(tokens, keras.layers.Dense(1)(hidden))


def test_function_metrics_count_as_keras2_counted_them():
    """A metric that reduces to a number counts with its batch's mask total (Keras 2: (1·1 + 3·9) / 10);
    a per-token metric is weighted by the mask; metric names are Keras's."""

    def batch_label(y_true, y_pred):
        return K.mean(y_true)

    def per_token(y_true, y_pred):
        return y_true[..., 0]

    model = _masked_model()
    model.compile(loss="mse", metrics=[batch_label, per_token, keras.losses.MeanSquaredError()])
    x = np.zeros((2, 10))
    x[0, 0], x[1, :9] = 5, 5
    y = np.stack([np.full((10, 1), 1.0), np.full((10, 1), 3.0)])
    y[1, 9] = 100.0  # a padded position: left out of the per-token mean
    logs = model.evaluate(x, y, batch_size=1, verbose=0, return_dict=True)
    assert logs["batch_label"] == pytest.approx((1 * 1 + (3 * 9 + 100) / 10 * 9) / 10, rel=1e-5)
    assert logs["per_token"] == pytest.approx((1 + 3 * 9) / 10, rel=1e-5)
    assert "mean_squared_error" in logs
