"""T5 (gau_keras.models.t5): shapes, the decoder's causality, the encoder/decoder halves against
the joint model, the names and versions of bert4keras, the Backbones' harness, the checkpoint.
Parity with the original bert4keras: tests/bert4keras/test_parity_t5.py."""

import numpy as np
import pytest

from gau_keras import build_transformer_model
from gau_keras.checkpoints import CheckpointError
from gau_keras.models import T5, T5_Decoder, T5_Encoder, T5Backbone, T5DecoderBackbone, T5EncoderBackbone
from gau_keras.models.registry import resolve_model_class
from tests.harness import run_backbone_test

pytestmark = pytest.mark.both_backends

TINY = dict(
    vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24, hidden_act="relu"
)
GATED = dict(TINY, hidden_act=["gelu", "linear"])
ENCODER_IDS = np.array([[5, 9, 3, 7, 2, 0, 0, 0], [4, 8, 12, 6, 30, 11, 3, 2]], "int32")
DECODER_IDS = np.array([[0, 6, 7, 2, 0], [0, 13, 14, 15, 9]], "int32")


def _moved(transformer, seed=0):
    rng = np.random.default_rng(seed)
    for weight in transformer.model.trainable_weights:
        value = np.asarray(weight.numpy() if hasattr(weight, "numpy") else weight)
        weight.assign((value + rng.normal(scale=0.1, size=value.shape)).astype("float32"))
    return transformer


@pytest.mark.parametrize(
    "name, cls, version",
    [
        ("t5", T5, "t5.1.0"),
        ("t5.1.0", T5, "t5.1.0"),
        ("t5.1.1", T5, "t5.1.1"),
        ("MT5.1.1", T5, "mt5.1.1"),
        ("t5_encoder", T5_Encoder, "t5.1.0"),
        ("mt5.1.1_encoder", T5_Encoder, "mt5.1.1"),
        ("t5.1.1_decoder", T5_Decoder, "t5.1.1"),
    ],
)
def test_the_bert4keras_names_select_the_class_and_the_version(name, cls, version):
    assert resolve_model_class(name) is cls
    transformer = build_transformer_model(GATED, model=name, return_keras_model=False)
    assert type(transformer) is cls and transformer.version == version


def test_joint_model_shapes_names_and_the_halves_compose_to_it():
    t5 = _moved(build_transformer_model(GATED, model="mt5.1.1", return_keras_model=False))
    assert [i.name for i in t5.model.inputs] == ["Encoder-Input-Token", "Decoder-Input-Token"]
    assert [i.name for i in t5.decoder.inputs] == ["Input-Context", "Decoder-Input-Token"]
    assert t5.encoder.get_layer("Embedding-Token") is t5.decoder.get_layer("Embedding-Token")
    probs = t5.model.predict([ENCODER_IDS, DECODER_IDS], verbose=0)
    assert probs.shape == (2, 5, 40)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    hidden = t5.encoder.predict(ENCODER_IDS, verbose=0)
    assert hidden.shape == (2, 8, 16)
    # the standalone decoder gets no padding mask from the context: padding rows aside, equal
    np.testing.assert_allclose(t5.decoder.predict([hidden[1:], DECODER_IDS[1:]], verbose=0), probs[1:], atol=1e-6)


def test_the_decoder_is_causal_and_the_encoder_is_not():
    t5 = _moved(build_transformer_model(TINY, model="t5", return_keras_model=False))
    probs = t5.model.predict([ENCODER_IDS, DECODER_IDS], verbose=0)
    changed = DECODER_IDS.copy()
    changed[:, 3] = 21
    after = t5.model.predict([ENCODER_IDS, changed], verbose=0)
    np.testing.assert_allclose(after[:, :3], probs[:, :3], atol=1e-6)
    assert np.abs(after[:, 3:] - probs[:, 3:]).max() > 1e-4
    hidden = t5.encoder.predict(ENCODER_IDS, verbose=0)
    encoder_changed = ENCODER_IDS.copy()
    encoder_changed[1, 6] = 21
    assert np.abs(t5.encoder.predict(encoder_changed, verbose=0)[1, :6] - hidden[1, :6]).max() > 1e-4
    # padding of the encoder input does not reach the decoder
    padded_changed = ENCODER_IDS.copy()
    padded_changed[0, 5:] = 0
    np.testing.assert_allclose(t5.model.predict([padded_changed, DECODER_IDS], verbose=0)[0], probs[0], atol=1e-6)


def test_versions_feed_forward_and_output_head():
    old = build_transformer_model(TINY, model="t5", return_keras_model=False)
    new = build_transformer_model(GATED, model="t5.1.1", return_keras_model=False)
    names = {layer.name for layer in new.model.layers}
    assert "Decoder-Output-LM" in names and "Decoder-Output-LM" not in {layer.name for layer in old.model.layers}
    assert len(new.layers["Encoder-Transformer-0-FeedForward"].input_dense) == 2
    assert len(old.layers["Encoder-Transformer-0-FeedForward"].input_dense) == 1
    assert "encoder/block_000/layer_001/DenseReluDense/wi_1/kernel" in str(new.variable_mapping())
    mt5 = build_transformer_model(GATED, model="mt5.1.1", return_keras_model=False)
    assert mt5.variable_mapping()["Encoder-Output-Norm"] == {"gamma": "encoder/rms_norm/scale"}
    logits = build_transformer_model(TINY, model="t5_decoder", with_lm="linear")
    assert logits.output_shape == (None, None, 40)
    hidden = build_transformer_model(TINY, model="t5_decoder", with_lm=False)
    assert hidden.output_shape == (None, None, 16)


def test_t5_refuses_lm_applications_and_unknown_versions():
    with pytest.raises(ValueError, match="application='lm'"):
        build_transformer_model(TINY, model="t5", application="lm")
    with pytest.raises(ValueError, match="version must be one of"):
        build_transformer_model(TINY, model="t5", version="t5.2")


def test_checkpoint_round_trip_and_a_bert_checkpoint_is_named(tmp_path):
    t5 = _moved(build_transformer_model(GATED, model="mt5.1.1", return_keras_model=False))
    t5.save_weights_as_checkpoint(str(tmp_path / "model.ckpt"))
    again = build_transformer_model(GATED, str(tmp_path / "model.ckpt"), model="mt5.1.1")
    np.testing.assert_allclose(
        again.predict([ENCODER_IDS, DECODER_IDS], verbose=0),
        t5.model.predict([ENCODER_IDS, DECODER_IDS], verbose=0),
        atol=1e-6,
    )
    with pytest.raises(CheckpointError, match="load it with model='mt5.1.1'"):
        build_transformer_model(GATED, str(tmp_path / "model.ckpt"), model="bert")
    with pytest.raises(CheckpointError, match="load it with model='mt5.1.1'"):
        build_transformer_model(GATED, str(tmp_path / "model.ckpt"), model="t5.1.1")
    bert = build_transformer_model(dict(TINY, hidden_act="gelu"), model="bert", return_keras_model=False)
    bert.save_weights_as_checkpoint(str(tmp_path / "bert" / "bert_model.ckpt"))
    with pytest.raises(CheckpointError, match=r"shared/embedding.*load it with model='bert'"):
        build_transformer_model(TINY, str(tmp_path / "bert" / "bert_model.ckpt"), model="t5")


def test_keep_tokens_select_rows_of_the_tied_and_the_untied_tables():
    t5 = _moved(build_transformer_model(GATED, model="t5.1.1", return_keras_model=False))
    checkpoint = {}
    for layer, variables in t5.variable_mapping().items():
        for attr, name in variables.items():
            obj = t5.layers[layer]
            for part in attr.split("."):
                obj = getattr(obj, part)
            checkpoint[name] = np.asarray(obj.numpy())
    checkpoint = {
        k: v.T if k in t5.transposed_variable_names() else v for k, v in checkpoint.items()
    }  # stored as the checkpoint has them
    keep = [0, 1, 2, 7, 9, 30]
    small = build_transformer_model(GATED, checkpoint, model="t5.1.1", keep_tokens=keep, return_keras_model=False)
    np.testing.assert_array_equal(
        small.layers["Embedding-Token"].embeddings.numpy(), checkpoint["shared/embedding"][keep]
    )
    np.testing.assert_array_equal(
        small.layers["Decoder-Output-LM"].kernel.numpy(), checkpoint["decoder/logits/kernel"][:, keep]
    )


@pytest.mark.slow
def test_t5_encoder_backbone_passes_the_backbone_harness():
    run_backbone_test(T5EncoderBackbone, TINY, [ENCODER_IDS], (2, 8, 16))


@pytest.mark.slow
def test_t5_decoder_backbone_passes_the_backbone_harness():
    run_backbone_test(T5DecoderBackbone, TINY, [np.ones((2, 8, 16), "float32"), DECODER_IDS], (2, 5, 40))


@pytest.mark.slow
def test_t5_backbone_passes_the_backbone_harness():
    run_backbone_test(T5Backbone, dict(GATED, version="t5.1.1"), [ENCODER_IDS, DECODER_IDS], (2, 5, 40))
