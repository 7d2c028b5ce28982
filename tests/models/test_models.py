"""Whole GAU-alpha / RoFormerV2 forwards against the numpy reference, and the
builder's behaviour (applications, configs, .keras round trip)."""

import json

import numpy as np
import pytest

from gau_keras import build_transformer_model
from gau_keras.models import GAU_alpha, GAUAlphaBackbone, RoFormerV2, RoformerV2Backbone
from tests import numpy_reference as ref
from tests.harness import SEGMENT_IDS, TOKEN_IDS, run_backbone_test
from tests.model_utils import TINY_GAU, TINY_ROFORMER, random_checkpoint, read_checkpoint, write_config

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

BATCH = np.array(
    [
        [2, 9, 14, 33, 5, 3, 0, 0, 0],  # right padding
        [0, 0, 0, 2, 9, 14, 33, 5, 3],  # left padding
        [2, 40, 41, 42, 43, 44, 45, 46, 3],
    ]
)
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1, 1]])


def reference(model, weights, ids, segments, application="encoder", min_len=16):
    if model == "gau_alpha":
        return ref.gau_alpha_forward(weights, ids, segments, 2, 8, 24, min_len, application)
    return ref.roformer_v2_forward(weights, ids, segments, 2, 2, application)


@pytest.mark.parametrize("model", ["gau_alpha", "roformer_v2"])
@pytest.mark.parametrize("application", ["encoder", "lm", "unilm"])
def test_forward_matches_numpy(tmp_path, model, application):
    config, ckpt = random_checkpoint(str(tmp_path), model)
    weights = read_checkpoint(ckpt)
    hidden = build_transformer_model(config, ckpt, model=model, application=application)
    logits = build_transformer_model(config, ckpt, model=model, application=application, with_mlm="linear")
    min_len = 1 if model == "gau_alpha" else 16
    if model == "gau_alpha":
        hidden = build_transformer_model(
            config, ckpt, model=model, application=application, softmax_plus_min_len=min_len
        )
        logits = build_transformer_model(
            config, ckpt, model=model, application=application, softmax_plus_min_len=min_len, with_mlm="linear"
        )
    exp_hidden, exp_logits = reference(model, weights, BATCH, SEGMENTS, application, min_len)
    got_logits = logits.predict([BATCH, SEGMENTS], verbose=0)
    if application == "encoder":  # LM and UniLM models always have the head (bert4keras)
        got_hidden = hidden.predict([BATCH, SEGMENTS], verbose=0)
        print(f"{model}/{application}: max abs diff hidden {np.abs(got_hidden - exp_hidden).max():.2e}")
        assert np.abs(got_hidden - exp_hidden).max() <= 1e-5
    print(f"{model}/{application}: max abs diff logits {np.abs(got_logits - exp_logits).max():.2e}")
    assert np.abs(got_logits - exp_logits).max() <= 1e-4


def test_softmax_floor_16_differs_only_for_short_sequences(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    weights = read_checkpoint(ckpt)
    model = build_transformer_model(config, ckpt, model="gau_alpha")
    got = model.predict([BATCH, SEGMENTS], verbose=0)
    np.testing.assert_allclose(got, reference("gau_alpha", weights, BATCH, SEGMENTS, min_len=16)[0], atol=1e-5)
    assert np.abs(got - reference("gau_alpha", weights, BATCH, SEGMENTS, min_len=1)[0]).max() > 1e-3


def test_longer_than_max_position(tmp_path, rng):
    config, ckpt = random_checkpoint(str(tmp_path), max_position_embeddings=64)
    weights = read_checkpoint(ckpt)
    ids = rng.integers(4, 60, size=(1, 600))
    ids[0, 550:] = 0
    segments = np.zeros_like(ids)
    model = build_transformer_model(config, ckpt, with_mlm="linear", model="gau_alpha")
    expected = ref.gau_alpha_forward(weights, ids, segments, 2, 8, 24, 16)[1]
    diff = np.abs(model.predict([ids, segments], verbose=0) - expected).max()
    print(f"gau_alpha/encoder, 600 tokens: max abs diff logits {diff:.2e}")
    assert diff <= 1e-4


@pytest.mark.parametrize("model", ["gau_alpha", "roformer_v2"])
def test_padding_invariance(tmp_path, model):
    config, ckpt = random_checkpoint(str(tmp_path), model)
    net = build_transformer_model(config, ckpt, model=model)
    ids = np.array([[2, 9, 14, 33, 5, 3]])
    padded = np.concatenate([ids, np.zeros((1, 7), int)], axis=1)
    short = net.predict([ids, np.zeros_like(ids)], verbose=0)
    long = net.predict([padded, np.zeros_like(padded)], verbose=0)
    np.testing.assert_allclose(long[:, :6], short, atol=1e-5)


def test_lm_is_causal(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    lm = build_transformer_model(config, ckpt, application="lm", with_mlm="linear", model="gau_alpha")
    a = np.array([[2, 9, 14, 33, 5, 3]])
    b = np.array([[2, 9, 14, 50, 51, 52]])
    out_a = lm.predict([a, np.zeros_like(a)], verbose=0)
    out_b = lm.predict([b, np.zeros_like(b)], verbose=0)
    np.testing.assert_allclose(out_a[:, :3], out_b[:, :3], atol=1e-5)
    assert np.abs(out_a[:, 3:] - out_b[:, 3:]).max() > 1e-3


def test_layer_names_follow_bert4keras():
    model = build_transformer_model(
        model="gau_alpha",
        with_mlm=True,
        embedding_size=12,
        **{
            k: v
            for k, v in TINY_GAU.items()
            if k
            not in ("hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size")
        },
    )
    names = {layer.name for layer in model.layers}
    for name in [
        "Input-Token",
        "Input-Segment",
        "Embedding-Token",
        "Embedding-Segment",
        "Embedding-Token-Segment",
        "Embedding-Norm",
        "Embedding-Mapping",
        "Embedding-Rotary-Position",
        "Transformer-0-GatedAttentionUnit",
        "Transformer-1-GatedAttentionUnit-Norm",
        "Output-Mapping",
        "Output-MLM-Activation",
    ]:
        assert name in names
    assert model.output.shape == (None, None, 60)


def test_keep_and_compound_tokens(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    table = read_checkpoint(ckpt)["bert/embeddings/word_embeddings"]
    keep = [0, 1, 2, 3, 10, 20, 30]
    compound = [[4, 5], ([1, 6], [1.0, 3.0])]
    model = build_transformer_model(config, ckpt, keep_tokens=keep, compound_tokens=compound, model="gau_alpha")
    got = model.get_layer("Embedding-Token").embeddings.numpy()
    kept = table[keep]
    expected = np.concatenate([kept, [(kept[4] + kept[5]) / 2, (kept[1] + 3 * kept[6]) / 4]])
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_hf_style_config_is_accepted(tmp_path):
    hf = {
        "architectures": ["GAUAlphaForMaskedLM"],
        "model_type": "gau_alpha",
        "vocab_size": 60,
        "hidden_size": 16,
        "intermediate_size": 24,
        "num_hidden_layers": 2,
        "attention_key_size": 8,
        "hidden_act": "swish",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "use_bias": False,
        "normalization": "softmax_plus",
        "attention_scale": True,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    transformer = build_transformer_model(str(path), return_keras_model=False, model="gau_alpha")
    assert transformer.layer_norm_epsilon == 1e-12
    assert transformer.attention_key_size == 8 and transformer.intermediate_size == 24
    hf["use_bias"] = True
    path.write_text(json.dumps(hf))
    with pytest.raises(ValueError, match="use_bias"):
        build_transformer_model(str(path), model="gau_alpha")


def test_bad_arguments_are_named(tmp_path):
    config = write_config(str(tmp_path), TINY_GAU)
    with pytest.raises(TypeError, match="hiden_size"):
        build_transformer_model(config, hiden_size=32, model="gau_alpha")
    with pytest.raises(ValueError, match="unknown model 'gau_beta'"):
        build_transformer_model(config, model="gau_beta")
    with pytest.raises(ValueError, match="application"):
        build_transformer_model(config, application="seq2seq", model="gau_alpha")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="broken.json"):
        build_transformer_model(str(broken), model="gau_alpha")


def test_bert_config_names_accepted_as_keywords():
    t = build_transformer_model(
        model="gau_alpha",
        vocab_size=30,
        hidden_size=8,
        num_hidden_layers=1,
        intermediate_size=8,
        attention_key_size=4,
        hidden_dropout_prob=0.2,
        type_vocab_size=3,
        return_keras_model=False,
    )
    assert t.dropout_rate == 0.2 and t.segment_vocab_size == 3


def test_model_classes_accepted_directly():
    for cls in (GAU_alpha, RoFormerV2):
        model = build_transformer_model(
            model=cls,
            vocab_size=30,
            hidden_size=8,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=8,
            attention_key_size=4,
        )
        assert model.output.shape == (None, None, 8)


def test_initializer_scale():
    t = build_transformer_model(
        model="gau_alpha",
        vocab_size=20000,
        hidden_size=64,
        num_hidden_layers=8,
        intermediate_size=128,
        attention_key_size=16,
        return_keras_model=False,
    )
    std = t.model.get_layer("Transformer-0-GatedAttentionUnit").i_dense.kernel.numpy().std()
    # truncated at 2 std: 1.13684723 * 0.8796 ~ 1 * stddev / sqrt(fan) * L**(-1/3)
    assert std == pytest.approx(64**-0.5 * 8 ** (-1 / 3), rel=0.05)
    emb = t.model.get_layer("Embedding-Token").embeddings.numpy().std()
    assert emb == pytest.approx(64**-0.5 * 8 ** (-1 / 3), rel=0.05)


def test_gau_alpha_backbone_passes_the_backbone_harness():
    run_backbone_test(
        GAUAlphaBackbone, {**TINY_GAU, "application": "unilm", "with_mlm": True}, [TOKEN_IDS, SEGMENT_IDS], (2, 8, 60)
    )


def test_roformer_v2_backbone_passes_the_backbone_harness():
    run_backbone_test(RoformerV2Backbone, {**TINY_ROFORMER, "application": "lm"}, [TOKEN_IDS, SEGMENT_IDS], (2, 8, 60))
