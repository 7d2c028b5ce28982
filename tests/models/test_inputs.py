"""The builder's id inputs are Keras floatx tensors, as bert4keras's are (issue 35, item 1).

bert4keras creates ``Input-Token`` / ``Input-Segment`` with Keras's default
dtype and casts them to integers in the embeddings, so its users write losses
with arithmetic on them (``y_mask = inputs[1][:, 1:]``; ``K.sum(loss * y_mask)``).
Here: the inputs' dtype under float32 and mixed precision, that arithmetic in
a compiled training step, and that a ``.keras`` file written before the change
(int32 inputs, tests/fixtures/legacy_int32_inputs.keras: a tiny GAU-α classifier
fine-tuned two steps) still loads and predicts what the same weights predict
in a model built now.
"""

import json

import keras
import numpy as np
import pytest
from keras import ops

from gau_keras import build_transformer_model
from gau_keras.layers import Loss
from gau_keras.layers.heads import FirstToken
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.both_backends

LEGACY = REPO_ROOT / "tests" / "fixtures" / "legacy_int32_inputs.keras"
#: the config the legacy file was built from
LEGACY_CONFIG = dict(
    vocab_size=50,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=1,
    intermediate_size=32,
    attention_key_size=8,
    hidden_act="swish",
    max_position_embeddings=64,
    type_vocab_size=2,
)
TOKENS = np.array([[2, 7, 9, 3, 0], [2, 5, 3, 0, 0]])


@pytest.fixture
def config_path(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(LEGACY_CONFIG), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("model", ["gau_alpha", "roformer_v2", "srupp"])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_id_inputs_are_floatx(config_path, model, policy):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        options = {"proj_size": 8} if model == "srupp" else {}
        built = build_transformer_model(config_path, None, model=model, **options)
    finally:
        keras.config.set_dtype_policy(previous)
    names = [tensor.name for tensor in built.inputs]
    assert names == (["Input-Token"] if model == "srupp" else ["Input-Token", "Input-Segment"])
    assert {keras.backend.standardize_dtype(tensor.dtype) for tensor in built.inputs} == {keras.config.floatx()}
    out = built.predict([TOKENS] if model == "srupp" else [TOKENS, np.zeros_like(TOKENS)], verbose=0)
    assert np.all(np.isfinite(ops.convert_to_numpy(out).astype("float32")))


class SegmentMaskedCrossEntropy(Loss):
    """bert4keras's seq2seq loss, written on the inputs as its examples write it."""

    def compute_loss(self, inputs, mask=None):
        y_true, y_mask, y_pred = inputs
        y_true = y_true[:, 1:]
        y_mask = y_mask[:, 1:]  # the segment ids: 1 on the part to predict
        y_pred = y_pred[:, :-1]
        loss = keras.losses.sparse_categorical_crossentropy(y_true, y_pred)
        return ops.sum(loss * y_mask) / ops.sum(y_mask)


def test_a_loss_does_arithmetic_on_the_segment_input(config_path):
    bert = build_transformer_model(
        config_path, None, model="gau_alpha", application="unilm", with_mlm=True, return_keras_model=False
    )
    output = SegmentMaskedCrossEntropy(2)(bert.model.inputs + bert.model.outputs)
    model = keras.Model(bert.model.inputs, output)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    segments = np.array([[0, 0, 0, 1, 1], [0, 0, 1, 1, 0]])
    first = model.train_on_batch([TOKENS, segments], None)
    for _ in range(3):
        last = model.train_on_batch([TOKENS, segments], None)
    assert np.isfinite(first) and last < first


def test_a_keras_file_with_int32_inputs_still_loads(config_path):
    legacy = keras.models.load_model(LEGACY)
    assert [keras.backend.standardize_dtype(t.dtype) for t in legacy.inputs] == ["int32", "int32"]
    encoder = build_transformer_model(config_path, None, model="gau_alpha")
    x = FirstToken(name="CLS")(encoder.output)
    now = keras.Model(encoder.inputs, keras.layers.Dense(3, activation="softmax", name="Classifier")(x))
    now.set_weights(legacy.get_weights())
    inputs = [TOKENS, np.zeros_like(TOKENS)]
    expected = now.predict(inputs, verbose=0)
    np.testing.assert_allclose(legacy.predict(inputs, verbose=0), expected, rtol=1e-6, atol=1e-6)
    assert np.all(np.abs(expected - 1 / 3) > 1e-3)  # trained: not a uniform guess


def test_bert4keras_bias_attributes_name_the_own_graphs_tensors(config_path):
    bert = build_transformer_model(config_path, None, model="gau_alpha", application="unilm", return_keras_model=False)
    assert bert.attention_bias is not None and bert.position_bias is not None
    assert bert.attention_bias is bert.compute_attention_bias(bert.inputs)  # built once for the graph
    bert.attention_bias = "replaced"  # bert4keras assigns it
    assert bert.compute_attention_bias(bert.inputs) == "replaced"
    encoder = build_transformer_model(config_path, None, model="gau_alpha", return_keras_model=False)
    assert encoder.attention_bias is None and encoder.position_bias is not None
