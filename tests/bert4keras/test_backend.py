"""gau_keras.backend (bert4keras's backend module) and its K namespace (Keras 2's backend).

Parity: every expression of CASES is evaluated here (gau_keras.backend's K and
functions) and by the original bert4keras 0.11.5 on tf_keras (its K and
backend module), on the same fixed random inputs, in one reference process.
Then the Keras 3 specifics: variables and values, the training phase inside
fit / predict, search_layer on a built model, recompute_grad's gradients,
set_gelu, K.gradients / K.function, the random functions.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from gau_keras import backend as B
from gau_keras import build_transformer_model
from gau_keras.backend import K
from tests.model_utils import TINY
from tests.reference.harness import run_bert4keras_code

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


def _inputs():
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.normal(size=shape).astype("float32")
    mask = np.ones((2, 5), "int32")
    mask[0, 3:] = 0
    mask[1, 4:] = 0
    probs = np.exp(f(2, 5, 4))
    labels = rng.integers(0, 4, size=(2, 5)).astype("int32")
    multi = (rng.random((2, 6)) < 0.4).astype("float32")
    logits6 = f(2, 6)
    logits6[1, 2] = -np.inf
    return {
        "x": f(2, 5, 4),
        "y": f(2, 4, 3),
        "w": f(4, 3),
        "v2": f(2, 4),
        "u2": f(2, 4),
        "x4": f(2, 3, 5, 4),
        "scores": f(2, 3, 5, 5),
        "s3": f(2, 5, 5),
        "m": mask,
        "causal": np.tril(np.ones((1, 1, 5, 5), bool)),
        "fbias": f(2, 1, 5, 5),
        "probs": probs / probs.sum(-1, keepdims=True),
        "labels": labels,
        "labels3": labels[..., None],
        "onehot": np.eye(4, dtype="float32")[labels],
        "bprobs": np.concatenate([rng.random((2, 3)), [[0.0, 1.0, 0.5], [1.0, 0.0, 1e-9]]]).astype("float32"),
        "btargets": (rng.random((4, 3)) < 0.5).astype("float32"),
        "multi": multi,
        "logits6": logits6,
        "pos_ids": np.array([[1, 3, 6], [5, 4, 0]], "int32"),
        "pos_pad": np.array([[1, 3, 0], [4, 0, 0]], "int32"),
        "positions": np.arange(5, dtype="float32")[None],
        "q": f(2, 5, 8),
        "k": f(2, 5, 8),
        "q4": f(2, 5, 3, 8),
        "t": np.array([0, 250, 1000, 1500, 2000, 2600, 4000], "float32"),
        "idx": np.array([[4, 0, 2], [1, 1, 3]], "int32"),
        "cond2": np.array([[True, False, True, True, False], [False, True, True, False, True]]),
        "neg": np.array([-1.0, 0.0, 0.25, 4.0], "float32"),
        "halves": np.array([-2.5, -0.5, 0.5, 1.5, 2.5], "float32"),
    }


#: name -> expression, evaluated with K / B (the backend module), np, and the inputs as tensors
CASES = {
    # reductions and elementwise
    "sum": "K.sum(x, axis=1)",
    "sum_keep": "K.sum(x, axis=[0, 2], keepdims=True)",
    "mean": "K.mean(x, 1)",
    "mean_bool": "K.mean(K.greater(x, 0))",
    "prod": "K.prod(x, axis=-1)",
    "std": "K.std(x, axis=1)",
    "var": "K.var(x, axis=2, keepdims=True)",
    "max": "K.max(x, 1)",
    "min": "K.min(x, axis=-1, keepdims=True)",
    "any": "K.any(K.greater(x, 1.0), axis=1)",
    "all": "K.all(K.greater(x, -2.0), axis=-1)",
    "argmax": "K.cast(K.argmax(x), 'int32')",
    "argmin": "K.cast(K.argmin(x, axis=1), 'int32')",
    "logsumexp": "K.logsumexp(x, axis=-1)",
    "cumsum": "K.cumsum(x, axis=1)",
    "cumprod": "K.cumprod(x, 2)",
    "softmax": "K.softmax(x)",
    "softmax_axis": "K.softmax(x, axis=1)",
    "exp": "K.exp(x)",
    "log": "K.log(K.abs(x))",
    "sqrt_neg": "K.sqrt(neg)",
    "square": "K.square(x)",
    "abs": "K.abs(x)",
    "sign": "K.sign(x)",
    "round": "K.round(halves)",
    "pow": "K.pow(x, 3)",
    "clip": "K.clip(x, -0.5, 0.7)",
    "clip_inverted": "K.clip(x, 0.5, 0.1)",
    "maximum": "K.maximum(x, 0.2)",
    "minimum": "K.minimum(x, q[..., :4])",
    "equal": "K.equal(labels, 2)",
    "not_equal": "K.not_equal(labels, 2)",
    "greater": "K.greater(x, 0.1)",
    "greater_equal": "K.greater_equal(labels, 2)",
    "less": "K.less(x, 0.1)",
    "less_equal": "K.less_equal(labels, 2)",
    "l2_normalize": "K.l2_normalize(x, axis=-1)",
    "l2_normalize_all": "K.l2_normalize(x)",
    "relu": "K.relu(x)",
    "relu_args": "K.relu(x, alpha=0.1, max_value=0.8, threshold=0.2)",
    "elu": "K.elu(x, 0.5)",
    "sigmoid": "K.sigmoid(x)",
    "hard_sigmoid": "K.hard_sigmoid(x * 4)",
    "tanh": "K.tanh(x)",
    "softplus": "K.softplus(x)",
    "softsign": "K.softsign(x)",
    "sin": "K.sin(x)",
    "cos": "K.cos(x)",
    "cast": "K.cast(labels, 'float32') / 3",
    "zeros_like": "K.zeros_like(x)",
    "ones_like": "K.ones_like(labels)",
    "one_hot": "K.one_hot(labels, 4)",
    "stop_gradient": "K.stop_gradient(x)",
    # shapes
    "concatenate": "K.concatenate([x, q[..., :4]], axis=1)",
    "concatenate_last": "K.concatenate([x, x])",
    "stack": "K.stack([x, q[..., :4]], axis=2)",
    "expand_dims": "K.expand_dims(x, 1)",
    "squeeze": "K.squeeze(labels3, -1)",
    "permute": "K.permute_dimensions(x4, (0, 2, 1, 3))",
    "transpose": "K.transpose(x)",
    "tile": "K.tile(x, [1, 2, 3])",
    "tile_int": "K.tile(neg, 3)",
    "repeat_elements": "K.repeat_elements(x, 2, axis=1)",
    "repeat": "K.repeat(v2, 3)",
    "arange": "K.arange(5)",
    "arange_float": "K.arange(1, 7, 2, dtype='float32')",
    "arange_negative": "K.arange(-3)",
    "gather": "K.gather(w, labels)",
    "reshape": "K.reshape(x, (2, -1))",
    "reshape_axis": "K.reshape(q, (2, -1), -1)",
    "reshape_two_axes": "K.reshape(x4, (3, 1), 1, (2, 2), 3)",
    "flatten": "K.flatten(x)",
    "flatten_tail": "K.flatten(x4, -2)",
    "flatten_middle": "K.flatten(x4, 1, 3)",
    "batch_flatten": "K.batch_flatten(x4)",
    "temporal_padding": "K.temporal_padding(x, (1, 2))",
    "shape": "K.shape(x)",
    "int_shape": "K.int_shape(x4)",
    "ndim": "K.ndim(x4)",
    "dtype": "K.dtype(labels)",
    "count_params": "K.count_params(w)",
    "cast_to_floatx": "K.cast_to_floatx(np.array([1, 2]))",
    "constant_shape": "K.constant(2.5, shape=(2, 3))",
    "constant_list": "K.constant([1, 2, 3, 4], dtype='int32', shape=[2, 2])",
    # products
    "dot2": "K.dot(v2, w)",
    "dot3": "K.dot(x, w)",
    "dot3x3": "K.dot(x, y)",
    "batch_dot_default": "K.batch_dot(x, y)",
    "batch_dot_2d": "K.batch_dot(v2, u2)",
    "batch_dot_2d_axes": "K.batch_dot(v2, u2, axes=1)",
    "batch_dot_3x2": "K.batch_dot(x, v2)",
    "batch_dot_axes": "K.batch_dot(x, x, axes=[2, 2])",
    "batch_dot_axes_1": "K.batch_dot(x, q, axes=(1, 1))",
    "batch_dot_4d": "K.batch_dot(x4, x4, axes=[3, 3])",
    # control flow
    "switch": "K.switch(cond2, x, -x)",
    "switch_same_rank": "K.switch(K.greater(x, 0), x, x * 10)",
    "where_scalars": "K.where(K.greater(x, 0), x, 0)",
    "where_both_scalars": "K.where(cond2, 1, -1)",
    "where_broadcast": "K.where(K.cast(m[:, :, None], 'bool'), x, -x)",
    "where_int_cond": "K.where(m, labels, 7)",
    # losses
    "cce": "K.categorical_crossentropy(onehot, probs)",
    "cce_logits": "K.categorical_crossentropy(onehot, x, True)",
    "cce_axis": "K.categorical_crossentropy(K.permute_dimensions(onehot, (0, 2, 1)), "
    "K.permute_dimensions(x, (0, 2, 1)), from_logits=True, axis=1)",
    "scce": "K.sparse_categorical_crossentropy(labels, probs)",
    "scce_logits": "K.sparse_categorical_crossentropy(labels, x, from_logits=True)",
    "scce_target3": "K.sparse_categorical_crossentropy(labels3, x, from_logits=True)",
    "scce_2d": "K.sparse_categorical_crossentropy(labels[:, :1], x[:, 0], from_logits=True)",
    "scce_axis": "K.sparse_categorical_crossentropy(labels, K.permute_dimensions(x, (0, 2, 1)), True, axis=1)",
    "scce_ignore": "K.sparse_categorical_crossentropy(labels, x, from_logits=True, ignore_class=2)",
    "bce": "K.binary_crossentropy(btargets, bprobs)",
    "bce_logits": "K.binary_crossentropy(btargets, bprobs * 4 - 2, True)",
    # bert4keras's backend functions
    "gelu_erf": "B.gelu_erf(x)",
    "gelu_tanh": "B.gelu_tanh(x)",
    "swish": "B.swish(x)",
    "leaky_relu": "B.leaky_relu(x)",
    "leaky_relu_alpha": "B.leaky_relu(x, alpha=0.05)",
    "piecewise": "B.piecewise_linear(t, {1000: 1, 2000: 0.1})",
    "piecewise_not_from_zero": "B.piecewise_linear(t, {500: 0.5, 1500: 2.0, 3000: 1.0}, from_zero=False)",
    "piecewise_zero_knot": "B.piecewise_linear(t, {0: 0.2, 2000: 1.0})",
    "piecewise_scalar": "B.piecewise_linear(1200, {1000: 1, 2000: 0.5})",
    "align": "B.align(m, [0, 2], 4)",
    "align_default_ndim": "B.align(m, [0, 2])",
    "align_negative": "B.align(m, [0, -1], 3)",
    "seqmask": "B.sequence_masking(x, m)",
    "seqmask_value": "B.sequence_masking(x, m, -np.inf, 1)",
    "seqmask_axes": "B.sequence_masking(s3, m, -1e12, [1, 2])",
    "seqmask_negative_axis": "B.sequence_masking(s3, m, 5.0, -1)",
    "seqmask_return": "B.sequence_masking(scores, m, -1e12, -1, causal, return_mask=True)",
    "seqmask_float_bias": "B.sequence_masking(scores, m, 0, 3, fbias)",
    "seqmask_bias_only": "B.sequence_masking(scores, None, -1e12, None, causal, True)",
    "seqmask_float_bias_only": "B.sequence_masking(scores, None, 0, None, fbias)",
    "seqmask_none": "B.sequence_masking(x)",
    "batch_gather": "B.batch_gather(x, idx)",
    "batch_gather_float_idx": "B.batch_gather(x, K.cast(idx, 'float32'))",
    "batch_gather_1d": "B.batch_gather(w, labels[0])",
    "batch_gather_deep": "B.batch_gather(x4, K.cast(K.greater(x4[..., 0], 0), 'int32')[..., :2])",
    "pool1d_max": "B.pool1d(x, 2)",
    "pool1d_avg": "B.pool1d(x, 3, strides=2, padding='same', pool_mode='avg')",
    "divisible_padding": "B.divisible_temporal_padding(x, 3)",
    "divisible_padding_exact": "B.divisible_temporal_padding(x, 5)",
    "rms": "B.root_mean_square(x)",
    "rms_axis": "B.root_mean_square(x, axis=-1, keepdims=True)",
    "sinusoidal": "B.sinusoidal_embeddings(positions, 8)",
    "sinusoidal_base": "B.sinusoidal_embeddings(K.cast(labels, 'float32'), 6, 100)",
    "sinusoidal_init": "B.Sinusoidal()((7, 6))",
    "rotary": "B.apply_rotary_position_embeddings(B.sinusoidal_embeddings(positions, 8), q)",
    "rotary_two": "B.apply_rotary_position_embeddings(B.sinusoidal_embeddings(positions, 8), q, k)",
    "rotary_heads": "B.apply_rotary_position_embeddings(B.sinusoidal_embeddings(positions, 8), q4)",
    "mlcce": "B.multilabel_categorical_crossentropy(multi, logits6)",
    "mlcce_soft": "B.multilabel_categorical_crossentropy(multi * 0.6 + 0.2, logits6)",
    "smlcce": "B.sparse_multilabel_categorical_crossentropy(pos_ids, logits6)",
    "smlcce_mask_zero": "B.sparse_multilabel_categorical_crossentropy(pos_pad, logits6, mask_zero=True)",
}
for _method in ("softmax", "squared_relu", "softmax_plus"):
    CASES.update(
        {
            f"attn_{_method}": f"B.attention_normalize(scores, m, method='{_method}')",
            f"attn_{_method}_causal": f"B.attention_normalize(scores, m, -1, '{_method}', causal)",
            f"attn_{_method}_bias_only": f"B.attention_normalize(scores, None, -1, '{_method}', causal)",
            f"attn_{_method}_float_bias": f"B.attention_normalize(scores, m, -1, '{_method}', fbias)",
            f"attn_{_method}_plain": f"B.attention_normalize(scores, method='{_method}')",
            f"attn_{_method}_axis": f"B.attention_normalize(scores, m, 2, '{_method}')",
        }
    )

_EVALUATE = """
def _evaluate(K, B, to_tensor):
    import numpy as np
    tensors = {name: to_tensor(value) for name, value in inputs.items()}
    results = {}
    for name, expression in CASES.items():
        try:
            value = eval(expression, {"K": K, "B": B, "np": np, **tensors})
        except Exception as error:   # reported by the case's test, the other cases still run
            results["error:" + name] = np.asarray(f"{type(error).__name__}: {error}")
            continue
        values = list(value) if isinstance(value, (list, tuple)) and not name.endswith("shape") else [value]
        for i, item in enumerate(values):
            results[name if len(values) == 1 else f"{name}/{i}"] = np.asarray(item)
    return results
"""

REFERENCE = (
    "CASES = %s\n"
    + _EVALUATE
    + """
import bert4keras.backend
outputs.update(_evaluate(bert4keras.backend.K, bert4keras.backend, tf.constant))
"""
)


@pytest.fixture(scope="module")
def parity():
    """(ours, reference): every case evaluated by gau_keras and by bert4keras."""
    inputs = _inputs()
    reference = run_bert4keras_code(REFERENCE % json.dumps(CASES), inputs)
    namespace = {"inputs": inputs, "CASES": CASES}
    exec(_EVALUATE, namespace)
    ours = namespace["_evaluate"](K, B, keras.ops.convert_to_tensor)
    return ours, reference


@pytest.mark.parametrize("name", sorted(CASES))
def test_parity_with_bert4keras(parity, name):
    ours, reference = parity
    for side, results in (("gau_keras", ours), ("bert4keras", reference)):
        assert "error:" + name not in results, f"{side}: {results['error:' + name]}"
    keys = sorted(k for k in reference if k == name or k.startswith(name + "/"))
    assert keys and keys == sorted(k for k in ours if k == name or k.startswith(name + "/"))
    for key in keys:
        got, want = ours[key], reference[key]
        assert got.shape == want.shape, key
        if want.dtype.kind in "biuU":
            assert got.dtype.kind == want.dtype.kind, key
            np.testing.assert_array_equal(got, want, err_msg=key)
        else:
            assert got.dtype == want.dtype, key
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=key)


# --------------------------------------------------------------------------- values and variables


def test_variables_and_values():
    v = K.variable(np.arange(6).reshape(2, 3), name="v")
    assert isinstance(v, keras.Variable) and K.dtype(v) == "float32" and K.int_shape(v) == (2, 3)
    K.set_value(v, np.ones((2, 3)))
    np.testing.assert_array_equal(K.get_value(v), np.ones((2, 3)))
    assert isinstance(K.eval(v), np.ndarray) and isinstance(K.eval(K.sum(v)), np.ndarray)
    K.update_add(v, np.full((2, 3), 2.0, "float32"))
    K.update_sub(v, np.ones((2, 3), "float32"))
    np.testing.assert_array_equal(K.eval(v), np.full((2, 3), 2.0))
    K.update(v, np.zeros((2, 3), "float32"))
    w = K.variable(3.0)
    K.batch_set_value([(w, 5.0)])
    assert [float(a.sum()) for a in K.batch_get_value([v, w])] == [0.0, 5.0]
    assert K.get_value(7) == 7 and K.count_params(v) == 6
    with pytest.raises(TypeError, match="variable"):
        K.set_value(K.constant(1.0), 2.0)
    with pytest.raises(ValueError, match="KerasTensor"):
        K.eval(keras.Input((3,)))


def test_zeros_is_a_variable_outside_layer_calls_only():
    made = {}

    class Probe(keras.layers.Layer):
        def call(self, x):
            made["inside"] = K.zeros((2,))
            return x

    assert isinstance(K.zeros((2, 3)), keras.Variable) and isinstance(K.ones((2,), dtype="int32"), keras.Variable)
    assert not isinstance(K.zeros((0, 3)), keras.Variable)
    Probe()(np.ones((1, 2), "float32"))
    assert not isinstance(made["inside"], keras.Variable)
    np.testing.assert_array_equal(K.eval(made["inside"]), [0.0, 0.0])


@pytest.mark.tensorflow_only
def test_shape_inside_a_traced_function():
    @tf.function(input_signature=[tf.TensorSpec([None, None, 4])])
    def dynamic(x):
        return K.shape(x), K.reshape(x, (2, -1), -1), K.flatten(x, 1)

    shape, split, flat = dynamic(tf.ones((3, 5, 4)))
    assert list(shape.numpy()) == [3, 5, 4] and split.shape == (3, 5, 2, 2) and flat.shape == (3, 20)


# --------------------------------------------------------------------------- training phase


class _PhaseMarker(keras.layers.Layer):
    """Outputs 1 in the training phase and 0 otherwise (no `training` argument, as bert4keras layers)."""

    def call(self, inputs):
        phase = K.cast(K.learning_phase(), "float32")
        return K.in_train_phase(K.ones_like(inputs[:, :1]), lambda: K.zeros_like(inputs[:, :1])) + 0 * phase


def test_in_train_phase_follows_fit_and_predict():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, _PhaseMarker()(inputs) + 0 * keras.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mse")
    data, targets = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    history = model.fit(data, targets, batch_size=4, epochs=1, verbose=0)
    assert history.history["loss"] == [pytest.approx(1.0)]
    assert model.evaluate(data, targets, verbose=0) == pytest.approx(0.0)
    assert np.all(model.predict(data, verbose=0) == 0)
    assert np.all(K.eval(model(data, training=True)) == 1) and np.all(K.eval(model(data)) == 0)


def test_in_train_phase_arguments():
    x, alt = K.constant([1.0, 2.0]), K.constant([3.0, 4.0])
    assert list(K.eval(K.in_train_phase(x, alt))) == [3.0, 4.0]  # no phase outside calls: the alternative
    assert list(K.eval(K.in_train_phase(x, alt, training=True))) == [1.0, 2.0]
    assert list(K.eval(K.in_train_phase(lambda: x, lambda: alt, training=0))) == [3.0, 4.0]
    assert list(K.eval(K.in_train_phase(x, alt, training=K.constant([True, False], dtype="bool")))) == [1.0, 4.0]
    assert list(K.eval(K.in_test_phase(x, alt, training=1))) == [3.0, 4.0]
    assert K.learning_phase() == 0


def test_random_choice_layer_trains():
    """bert4keras's BERT-of-Theseus pattern: K.random_binomial + K.in_train_phase in a layer under fit."""

    class BinaryRandomChoice(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            # JAX traces the step: its random ops need a generator the layer owns (Keras 3's rule)
            self.seed = keras.random.SeedGenerator(0) if keras.backend.backend() == "jax" else None

        def call(self, inputs):
            source, target = inputs
            mask = K.random_binomial(shape=[1], p=0.5, seed=self.seed)
            return K.in_train_phase(mask * source + (1 - mask) * target, target)

    inputs = keras.Input((2,))
    output = BinaryRandomChoice()([keras.layers.Dense(1)(inputs), keras.layers.Dense(1)(inputs)])
    model = keras.Model(inputs, output)
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(np.ones((16, 2)), np.zeros((16, 1)), batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_random_functions():
    draws = K.eval(K.random_binomial((20000,), p=0.3))
    assert draws.dtype == np.float32 and set(np.unique(draws)) == {0.0, 1.0}
    assert abs(draws.mean() - 0.3) < 0.02
    np.testing.assert_array_equal(
        K.eval(K.random_binomial((50,), 0.5, seed=3)), K.eval(K.random_bernoulli((50,), 0.5, seed=3))
    )
    assert not np.array_equal(K.eval(K.random_binomial((50,), 0.5)), K.eval(K.random_binomial((50,), 0.5)))
    assert np.all(K.eval(K.random_binomial((5,), p=0.0)) == 0) and np.all(K.eval(K.random_binomial((5,), 1.0)) == 1)
    uniform = K.eval(K.random_uniform((1000,), -2.0, -1.0, seed=1))
    assert uniform.min() >= -2.0 and uniform.max() < -1.0
    normal = K.eval(K.random_normal((2, 3000), mean=5.0, stddev=0.1, seed=2))
    assert normal.shape == (2, 3000) and abs(normal.mean() - 5.0) < 0.01
    assert np.abs(K.eval(K.truncated_normal((1000,), stddev=1.0, seed=4))).max() <= 2.0


# --------------------------------------------------------------------------- graph search, gradients, functions


def test_search_layer_in_a_built_model():
    bert = build_transformer_model(model="gau_alpha", return_keras_model=False, **TINY["gau_alpha"])
    output = keras.layers.Dense(2, name="classifier")(keras.layers.Lambda(lambda x: x[:, 0])(bert.model.output))
    model = keras.Model(bert.model.inputs, output)
    embedding = B.search_layer(output, "Embedding-Token")
    assert embedding is model.get_layer("Embedding-Token") and embedding.embeddings.shape == (60, 16)
    assert B.search_layer(model.get_layer("classifier"), "classifier").name == "classifier"
    assert B.search_layer(output, "no-such-layer") is None
    assert B.search_layer(model, "Embedding-Token") is embedding
    with pytest.raises(ValueError, match="symbolic output"):
        B.search_layer(K.constant([1.0]), "Embedding-Token")


@pytest.mark.tensorflow_only
def test_gradients_in_a_traced_function_and_error_eagerly():
    v = K.variable([1.0, 2.0, 3.0])

    @tf.function
    def penalty():
        loss = K.sum(K.square(v) * K.constant([1.0, 2.0, 3.0]))
        return K.gradients(loss, [v])[0]

    np.testing.assert_allclose(penalty().numpy(), [2.0, 8.0, 18.0])
    with pytest.raises(RuntimeError, match="train_step"):
        K.gradients(K.sum(v), [v])


def test_function_runs_a_functional_graph():
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(2, kernel_initializer="ones")(inputs)
    run = K.function([inputs], [hidden, K.sum(hidden, axis=1)])
    out, total = run([np.ones((4, 3), "float32")])
    np.testing.assert_allclose(out, np.full((4, 2), 3.0))
    np.testing.assert_allclose(total, np.full((4,), 6.0))
    with pytest.raises(ValueError, match="updates"):
        K.function([inputs], [hidden], updates=[hidden])


# --------------------------------------------------------------------------- recompute_grad, set_gelu, strings


def _recompute_gradients(monkeypatch, recompute):
    monkeypatch.setenv("RECOMPUTE", "1" if recompute else "0")

    class Block(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = keras.layers.Dense(6, activation="tanh")
            self.dropout = keras.layers.Dropout(0.3)
            self.out = keras.layers.Dense(6)

        @B.recompute_grad
        def call(self, inputs, training=None):
            x, y = inputs
            return self.out(self.dropout(self.dense(x), training=training)) * y

    keras.utils.set_random_seed(0)
    block = Block()
    x = K.constant(np.random.default_rng(0).normal(size=(3, 6)))
    y = K.constant(np.random.default_rng(1).normal(size=(3, 6)))
    block([x, y])
    keras.utils.set_random_seed(5)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = K.sum(K.square(block([x, y], training=True)))
    grads = tape.gradient(loss, [x] + block.trainable_variables)
    return Block.call, float(loss), [g.numpy() for g in grads], K.eval(block([x, y], training=False))


@pytest.mark.tensorflow_only
def test_recompute_grad_gives_the_same_gradients(monkeypatch):
    plain_call, plain_loss, plain_grads, plain_out = _recompute_gradients(monkeypatch, False)
    call, loss, grads, out = _recompute_gradients(monkeypatch, True)
    assert not hasattr(plain_call, "__wrapped__") and hasattr(call, "__wrapped__")
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    for got, want in zip(grads, plain_grads):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, plain_out, rtol=1e-6)


def test_set_gelu_switches_the_activation_name_of_our_layers_not_keras(tmp_path):
    """set_gelu('tanh'): our layers and the face's keras.activations.get take the tanh GELU for
    'gelu'; Keras's own name table (keras.activations.get, Dense) is left as it is."""
    from gau_keras.layers import FeedForward

    x = np.linspace(-3, 3, 13).astype("float32")
    try:
        B.set_gelu("tanh")
        assert B.keras.activations.get("gelu") is B.gelu_tanh
        assert keras.activations.get("gelu") is keras.activations.gelu
        assert keras.layers.Dense(1, activation="gelu").activation is keras.activations.gelu
        layer = FeedForward(4, activation="gelu")
        assert layer.activation == [B.gelu_tanh]
        restored = FeedForward.from_config(layer.get_config())
        assert restored.activation == [B.gelu_tanh]
        keras.Sequential([keras.Input((3,)), layer]).save(tmp_path / "tanh.keras")
        with pytest.raises(ValueError, match="version"):
            B.set_gelu("sigmoid")
    finally:
        B.set_gelu("erf")
    loaded = keras.saving.load_model(tmp_path / "tanh.keras")  # keeps the tanh GELU it was built with
    assert loaded.layers[0].activation == [B.gelu_tanh]
    assert FeedForward(4, activation="gelu").activation == [keras.activations.gelu]
    assert B.keras.activations.get("gelu") is keras.activations.get("gelu") is keras.activations.gelu
    np.testing.assert_allclose(K.eval(keras.activations.get("gelu")(x)), K.eval(B.gelu_erf(x)), rtol=1e-6)
    assert not np.allclose(K.eval(B.gelu_tanh(x)), K.eval(B.gelu_erf(x)), rtol=0, atol=1e-6)


def test_sequence_masking_infinity_strings():
    x = K.constant(np.ones((1, 3)))
    masked = K.eval(B.sequence_masking(x, np.array([[1, 1, 0]]), "-inf"))
    np.testing.assert_array_equal(masked, np.array([[1.0, 1.0, -1e12]], "float32"))
    assert K.eval(B.sequence_masking(x, np.array([[0, 1, 1]]), "inf"))[0, 0] == np.float32(1e12)
    with pytest.raises(ValueError, match="value"):
        B.sequence_masking(x, np.array([[1, 1, 0]]), "nan")


def test_bad_arguments_name_the_argument():
    x = K.constant(np.ones((2, 6)))
    with pytest.raises(ValueError, match="at least one"):
        B.apply_rotary_position_embeddings(x)
    with pytest.raises(ValueError, match="same shape"):
        B.apply_rotary_position_embeddings(x[None], x[None], x[None, :, :4])
    with pytest.raises(ValueError, match="increasing"):
        B.align(x, [1, 0], 2)
    with pytest.raises(ValueError, match="pairs"):
        K.reshape(x, (3, -1), 1, (2,))
    with pytest.raises(ValueError, match="method"):
        B.attention_normalize(x, method="sparsemax")
    with pytest.raises(ValueError, match="batch axis"):
        K.batch_dot(x, x, axes=0)


def test_module_names():
    import tensorflow

    from gau_keras.backend import do_recompute
    from gau_keras.backend import tf as backend_tf

    # the keras handed out is Keras 3 seen through Keras 2's names (gau_keras.bert4keras.keras2), not Keras itself
    assert B.keras is not keras and B.keras.layers is keras.layers and B.keras.ops is keras.ops
    assert issubclass(B.keras.Model, keras.Model) and B.keras.models.Model is B.keras.Model
    assert B.is_tf_keras is True and backend_tf is tensorflow
    assert do_recompute in (True, False) and isinstance(B.get_available_gpus(), list)
    assert (
        keras.saving.get_custom_objects()["multilabel_categorical_crossentropy"]
        is B.multilabel_categorical_crossentropy
    )
    assert K.floatx() == "float32" and K.epsilon() == pytest.approx(1e-7) and K.backend() == keras.backend.backend()
    assert K.is_tensor(K.constant(1.0)) and not K.is_tensor(np.ones(2)) and K.is_keras_tensor(keras.Input((2,)))
    assert B.symbolic(len) is len and K.symbolic(len) is len


# ---------------------------------------------------------------- bad input (issue 36)


def test_a_mask_of_another_length_or_batch_is_named():
    x = np.zeros((2, 5, 3), "float32")
    with pytest.raises(ValueError, match=r"sequence_masking: the mask's length \(axis 1 of x\) is 4 where x has 5"):
        B.sequence_masking(x, np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"sequence_masking: the mask's batch is 3 where x has 2"):
        B.sequence_masking(x, np.ones((3, 5)))
    with pytest.raises(ValueError, match=r"the mask must be \[batch, length\], got shape \(2, 5, 1\)"):
        B.sequence_masking(x, np.ones((2, 5, 1)))
    from gau_keras.layers import GlobalPointer

    layer = GlobalPointer(heads=2, head_size=4)
    with pytest.raises(ValueError, match=r"GlobalPointer .*: the mask's length \(axis 2 of x\) is 4 where x has 5"):
        layer(x, mask=np.ones((2, 4), bool))


def test_batch_gather_refuses_fractional_indices():
    params = np.arange(12, dtype="float32").reshape(2, 6)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(B.batch_gather(params, np.array([[1.0], [2.0]]))), [[1], [8]]
    )  # whole floats are indices, as in bert4keras
    with pytest.raises(ValueError, match="batch_gather: indices must be whole numbers, got float64 values such as 1.5"):
        B.batch_gather(params, np.array([[1.5], [2.0]]))


def test_one_mask_for_the_whole_batch_broadcasts():
    x = np.ones((2, 3, 1), "float32")
    got = keras.ops.convert_to_numpy(B.sequence_masking(x, np.array([[1, 1, 0]]), value=0))
    np.testing.assert_array_equal(got[..., 0], [[1, 1, 0], [1, 1, 0]])


def test_shape_items_reshape_inside_a_compiled_loss():
    """``K.reshape(x, (K.shape(x)[0], -1))`` in a loss that Keras compiles (a jit on JAX, where K.shape
    gives concrete sizes)."""

    def flat_mse(y_true, y_pred):
        y_pred = K.reshape(y_pred, (K.shape(y_pred)[0], -1))
        return K.mean(K.square(K.reshape(y_true, (K.shape(y_true)[0], -1)) - y_pred))

    x = keras.layers.Input(shape=(3, 4))
    model = keras.models.Model(x, keras.layers.Dense(4, kernel_initializer="zeros")(x))
    model.compile(loss=flat_mse, optimizer="adam")
    assert model.evaluate(np.ones((2, 3, 4)), np.full((2, 3, 4), 2.0), verbose=0) == pytest.approx(4.0)
