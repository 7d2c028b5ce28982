"""gau_keras.models.gpt: GPT, GPT2 and GPT2_ML (shapes, layouts, causality, refused options,
checkpoints of another layout, the Backbone harness). Parity with bert4keras:
tests/bert4keras/test_parity_decoders.py."""

import numpy as np
import pytest

from gau_keras.checkpoints import CheckpointError
from gau_keras.models import (
    GPT,
    GPT2,
    GPT2_ML,
    GPT2Backbone,
    GPT2MLBackbone,
    GPTBackbone,
    build_transformer_model,
    registry,
)
from tests.harness import SEGMENT_IDS, TOKEN_IDS, run_backbone_test
from tests.model_utils import TINY_BERT

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

MODELS = ("gpt", "gpt2", "gpt2_ml")


def feeds(model, token_ids=TOKEN_IDS, segment_ids=SEGMENT_IDS):
    return [token_ids, segment_ids] if model == "gpt" else [token_ids]


def build(model, checkpoint=None, **options):
    return build_transformer_model(dict(TINY_BERT), checkpoint, model=model, return_keras_model=False, **options)


def predict(transformer, arrays):
    return transformer.model.predict(arrays, verbose=0)


def test_the_names_lead_to_the_classes():
    assert [registry.resolve_model_class(n) for n in MODELS] == [GPT, GPT2, GPT2_ML]
    assert not any(registry.MODELS[n].is_encoder or registry.MODELS[n].has_mlm_head for n in MODELS)


@pytest.mark.parametrize("model", MODELS)
def test_inputs_and_the_lm_probabilities_through_the_tied_embedding(model):
    transformer = build(model)
    net = transformer.model
    expected_inputs = ["Input-Token", "Input-Segment"] if model == "gpt" else ["Input-Token"]
    assert [t.name.split(":")[0] for t in net.inputs] == expected_inputs
    assert net.output_names == ["LM-Activation"]
    assert "Attention-LM-Mask" in {layer.name for layer in net.layers}
    probs = predict(transformer, feeds(model))
    assert probs.shape == (2, 8, 60)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    # the logits are the hidden states times the token embedding: no bias, no transform
    logits = predict(build(model, final_activation="linear"), feeds(model))
    assert logits.shape == (2, 8, 60) and (logits < 0).any()


LAYOUTS = {
    "gpt": {"Embedding-Dropout", "Transformer-0-MultiHeadSelfAttention-Norm", "Transformer-0-FeedForward-Norm"},
    "gpt2": {"Transformer-0-MultiHeadSelfAttention-Norm", "Output-Norm", "Output-Dropout"},
    "gpt2_ml": {"Embedding-Norm", "Transformer-0-FeedForward-Norm-0", "Transformer-0-FeedForward-Norm-1"},
}
ABSENT = {
    "gpt": {"Embedding-Norm", "Output-Norm", "MLM-Dense", "MLM-Bias"},
    "gpt2": {"Embedding-Norm", "Embedding-Dropout", "Embedding-Segment", "MLM-Bias"},
    "gpt2_ml": {"Embedding-Dropout", "Transformer-0-MultiHeadSelfAttention-Norm", "Output-Norm"},
}
EPSILONS = {"gpt": 1e-12, "gpt2": 1e-5, "gpt2_ml": 1e-5}


@pytest.mark.parametrize("model", MODELS)
def test_each_layout_has_its_own_norms_and_epsilons(model):
    net = build(model).model
    names = {layer.name for layer in net.layers}
    assert LAYOUTS[model] <= names and not ABSENT[model] & names, sorted(names)
    norms = [layer for layer in net.layers if layer.name.endswith(("Norm", "Norm-0", "Norm-1"))]
    assert norms and {layer.epsilon for layer in norms} == {EPSILONS[model]}


@pytest.mark.parametrize("model", MODELS)
def test_a_later_token_does_not_change_earlier_outputs(model):
    transformer = build(model)
    before = predict(transformer, feeds(model))
    token_ids, segment_ids = TOKEN_IDS.copy(), SEGMENT_IDS.copy()
    token_ids[1, 5:] = [40, 41, 42]
    segment_ids[1, 5:] = 0
    after = predict(transformer, feeds(model, token_ids, segment_ids))
    np.testing.assert_allclose(after[:, :5], before[:, :5], atol=1e-6)
    assert np.abs(after[1, 5:] - before[1, 5:]).max() > 1e-4


def test_application_lm_is_the_same_model_and_unilm_is_refused():
    default, lm = build("gpt2"), build("gpt2", application="lm")
    lm.model.set_weights(default.model.get_weights())
    np.testing.assert_allclose(predict(lm, [TOKEN_IDS]), predict(default, [TOKEN_IDS]), atol=1e-6)
    with pytest.raises(ValueError, match="causal language model"):
        build("gpt", application="unilm")


@pytest.mark.parametrize(
    "model, options, message",
    [
        ("gpt", {"with_mlm": True}, "always its LM head"),
        ("gpt2", {"with_pool": True}, "has no pooler"),
        ("gpt2_ml", {"with_nsp": True}, "has no pooler"),
        ("gpt", {"embedding_size": 8}, "must be equal"),
        ("gpt", {"residual_attention_scores": True}, "not supported by GPT"),
        ("gpt2", {"custom_position_ids": True}, "takes no position ids"),
        ("gpt2_ml", {"final_activation": "nope"}, "not a Keras activation"),
    ],
)
def test_options_the_models_cannot_honour_are_refused(model, options, message):
    with pytest.raises(ValueError, match=message):
        build(model, **options)


def test_gpt2_ignores_a_config_segment_vocabulary_as_bert4keras_does():
    assert build("gpt2", segment_vocab_size=2).segment_vocab_size == 0


def test_checkpoint_names_are_the_released_ones():
    names = {n for v in build("gpt2").variable_mapping().values() for n in v.values()}
    assert {"gpt/output/LayerNorm/gamma", "gpt/transformer/layer_1/input/LayerNorm/beta"} <= names
    assert "gpt/transformer/layer_0/attention/input/LayerNorm/gamma" in names
    names = {n for v in build("gpt2_ml").variable_mapping().values() for n in v.values()}
    assert {"newslm/embeddings/word_embed", "newslm/layer01/context_projection_layer/kernel"} <= names
    assert "newslm/layer00/LayerNorm_mlp_ln1/gamma" in names
    names = {n for v in build("gpt").variable_mapping().values() for n in v.values()}
    assert "gpt/transformer/layer_0/attention/output/LayerNorm/gamma" in names


def _saved(model, directory):
    transformer = build(model)
    return transformer.save_weights_as_checkpoint(str(directory / model / "bert_model.ckpt")) or str(
        directory / model / "bert_model.ckpt"
    )


@pytest.mark.parametrize(
    "source, target", [("bert", "gpt2"), ("gpt2", "gpt2_ml"), ("gpt2", "gpt"), ("gpt", "gpt2"), ("gpt2_ml", "gpt")]
)
def test_a_checkpoint_of_another_layout_names_the_model_it_is_for(source, target, tmp_path):
    checkpoint = _saved(source, tmp_path)
    with pytest.raises(CheckpointError, match=f"load it with model='{source}'"):
        build(target, checkpoint)


def test_keep_tokens_pick_rows_of_the_released_embedding(tmp_path):
    source = build("gpt2_ml")
    checkpoint = source.save_weights_as_checkpoint(str(tmp_path / "bert_model.ckpt")) or str(
        tmp_path / "bert_model.ckpt"
    )
    keep = [0, 2, 3, 5, 7, 9, 11]
    kept = build("gpt2_ml", checkpoint, keep_tokens=keep)
    np.testing.assert_array_equal(
        kept.model.get_layer("Embedding-Token").get_weights()[0],
        source.model.get_layer("Embedding-Token").get_weights()[0][keep],
    )


def test_gpt_backbone_passes_the_backbone_harness():
    run_backbone_test(GPTBackbone, dict(TINY_BERT), [TOKEN_IDS, SEGMENT_IDS], (2, 8, 60))


def test_gpt2_backbone_passes_the_backbone_harness():
    run_backbone_test(GPT2Backbone, dict(TINY_BERT, final_activation="linear"), [TOKEN_IDS], (2, 8, 60))


def test_gpt2_ml_backbone_passes_the_backbone_harness():
    run_backbone_test(GPT2MLBackbone, dict(TINY_BERT), [TOKEN_IDS], (2, 8, 60))
