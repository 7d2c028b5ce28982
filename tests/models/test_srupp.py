"""gau_keras.models.srupp through build_transformer_model: segment memory, checkpoint names,
encoder heads; SRUppBackbone and SegmentMemory through the harness (tests/harness.py)."""

import keras
import numpy as np
import pytest
from keras import ops

from gau_keras import build_transformer_model
from gau_keras.models import SRUppBackbone
from gau_keras.models.srupp.model import SegmentMemory
from tests.harness import PADDING, TOKEN_IDS, floats, run_backbone_test, run_layer_test

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

CONFIG = dict(
    model="srupp",
    vocab_size=23,
    hidden_size=8,
    num_hidden_layers=3,
    proj_size=4,
    num_attention_heads=2,
    attention_every_n_layers=2,
    embedding_size=6,
)


def test_lm_with_memory_continues_the_whole_sequence(rng):
    L1 = L2 = 4
    whole = build_transformer_model(application="lm", return_keras_model=False, **CONFIG)
    segmented = build_transformer_model(application="lm", memory_length=L1, **CONFIG)
    segmented.set_weights(whole.model.get_weights())
    tokens = rng.integers(1, 23, size=(2, L1 + L2))
    expected = ops.convert_to_numpy(whole.model(tokens))[:, L1:]
    x, memory, states = whole.layers["Embedding-Token"](tokens[:, :L1]), [], []
    for i in range(CONFIG["num_hidden_layers"]):
        memory.append(ops.convert_to_tensor(ops.convert_to_numpy(x)))  # without the token mask
        x, c = whole.layers[f"SRUpp-{i}"](x, return_state=True)
        states.append(c)
    outputs = segmented([ops.convert_to_tensor(tokens[:, L1:])] + memory + states)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs[0]), expected, rtol=1e-5, atol=1e-6)
    for i in range(CONFIG["num_hidden_layers"]):  # the next memory is this segment's layer input
        assert outputs[1 + i].shape == (2, L1, 6 if i == 0 else 8)


def test_lm_is_causal(rng):
    model = build_transformer_model(application="lm", **CONFIG)
    tokens = rng.integers(1, 23, size=(2, 6))
    changed = tokens.copy()
    changed[:, 4:] = rng.integers(1, 23, size=(2, 2))
    a, b = ops.convert_to_numpy(model(tokens)), ops.convert_to_numpy(model(changed))
    np.testing.assert_allclose(a[:, :4], b[:, :4], rtol=1e-6, atol=1e-7)
    assert not np.allclose(a[:, 4:], b[:, 4:])


def test_encoder_checkpoint_names():
    """(Its checkpoint and .keras round trips: test_srupp_backbone_passes_the_backbone_harness.)"""
    transformer = build_transformer_model(application="encoder", with_mlm=True, return_keras_model=False, **CONFIG)
    names = set(name for layer in transformer.variable_mapping().values() for name in layer.values())
    assert {
        "srupp/embeddings/word_embeddings",
        "srupp/layer_0/transform/linear2/kernel",
        "srupp/layer_1/transform/linear3/kernel",
        "srupp/layer_1/transform/alpha",
        "srupp/layer_2/weight_c",
        "cls/predictions/transform/dense/kernel",
    } <= names
    assert "srupp/layer_0/transform/alpha" not in names  # layer 0 has no attention (every 2nd layer)


def test_encoder_with_classifier_trains(rng):
    transformer = build_transformer_model(application="encoder", return_keras_model=False, **CONFIG)
    pooled = keras.layers.GlobalAveragePooling1D()(transformer.model.output)
    classifier = keras.Model(transformer.model.inputs, keras.layers.Dense(3)(pooled))
    classifier.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens = rng.integers(1, 23, size=(4, 6))
    history = classifier.fit(tokens, rng.integers(0, 3, size=4), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_its_layers_on_hidden_states_of_the_wrong_rank_name_the_layout_and_the_shape():
    t = build_transformer_model(application="lm", return_keras_model=False, **CONFIG)
    with pytest.raises(
        ValueError,
        match=r"^SRUpp-0: the input must be \[batch, length, features\] \(rank 3\), "
        r"got shape \(None, 6\)$",
    ):
        t.apply_main_layers(keras.Input((6,)), 0)  # layers reused on other tensors, bert-of-theseus style


def test_srupp_backbone_passes_the_backbone_harness():
    arguments = {key: value for key, value in CONFIG.items() if key != "model"}
    run_backbone_test(SRUppBackbone, {**arguments, "vocab_size": 60, "with_mlm": True}, [TOKEN_IDS], (2, 8, 60))


def test_segment_memory_passes_the_layer_harness():
    run_layer_test(
        SegmentMemory,
        {"memory_length": 3},
        [floats(2, 3, 8), floats(2, 5, 8, seed=1)],
        (2, 3, 8),
        input_mask=[None, PADDING],
        expected_output_mask=None,
    )
