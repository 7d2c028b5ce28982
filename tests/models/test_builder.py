"""The builder object and bert4keras's build_transformer_model arguments:
attributes scripts read, with_pool, segment_vocab_size=0, custom_position_ids,
prefix / layers sharing, additional_input_layers, and the options refused with a reason."""

import warnings

import keras
import numpy as np
import pytest

from gau_keras.models import GAU_alpha, RoFormerV2, Transformer, build_transformer_model
from tests.model_utils import TINY_GAU, random_checkpoint

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

IDS = np.array([[2, 9, 14, 33, 5, 3, 0, 0], [2, 40, 41, 42, 43, 44, 45, 3]])
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1]])
SMALL = dict(
    vocab_size=60, hidden_size=16, num_hidden_layers=1, intermediate_size=24, attention_key_size=8, hidden_act="swish"
)


def test_builder_object_attributes(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    bert = build_transformer_model(config, ckpt, model=GAU_alpha, return_keras_model=False)
    assert isinstance(bert, Transformer) and isinstance(bert.model, keras.Model)
    assert (bert.num_hidden_layers, bert.hidden_size, bert.vocab_size) == (2, 16, 60)
    assert [x.name for x in bert.inputs] == ["Input-Token", "Input-Segment"]
    assert bert.input == bert.inputs and bert.outputs == [bert.output]
    assert bert.model.inputs == bert.inputs
    assert "Transformer-1-GatedAttentionUnit" in bert.layers
    assert (
        bert.apply(layer=keras.layers.Dense, name="Transformer-1-GatedAttentionUnit")
        is bert.layers["Transformer-1-GatedAttentionUnit"]
    )  # apply(inputs=None) returns the named layer
    assert bert.simplify([None, 3]) == 3 and bert.simplify([1, None, 2]) == [1, 2]
    kernel = keras.ops.convert_to_numpy(bert.initializer((200, 16)))  # a callable initializer
    assert kernel.shape == (200, 16) and 0 < kernel.std() < 0.2
    head = keras.layers.Dense(3, kernel_initializer=bert.initializer)(bert.output)
    assert keras.Model(bert.inputs, head).predict([IDS, SEGMENTS], verbose=0).shape == (2, 8, 3)


def test_with_pool_rules_and_values(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    encoder = build_transformer_model(config, ckpt, return_keras_model=False, model="gau_alpha")
    with pytest.warns(UserWarning, match="bert/pooler/dense/kernel, bert/pooler/dense/bias") as record:
        pooled = build_transformer_model(
            config, ckpt, with_pool=True, layers=encoder.layers, return_keras_model=False, model="gau_alpha"
        )
    assert len([w for w in record if "pooler" in str(w.message)]) == 1  # one warning, both names
    assert pooled.model.output.shape == (None, 16)
    hidden = encoder.model.predict([IDS, SEGMENTS], verbose=0)
    dense = pooled.layers["Pooler-Dense"]
    expected = np.tanh(hidden[:, 0] @ dense.kernel.numpy() + dense.bias.numpy())
    np.testing.assert_allclose(pooled.model.predict([IDS, SEGMENTS], verbose=0), expected, atol=1e-5)

    both = build_transformer_model(
        config, with_pool="linear", with_mlm=True, return_keras_model=False, model="gau_alpha"
    )
    assert [tuple(o.shape) for o in both.outputs] == [(None, 16), (None, None, 60)]
    assert both.layers["Pooler-Dense"].activation is keras.activations.linear
    # SimBERT's layout
    simbert = build_transformer_model(config, with_pool="linear", application="unilm", model="gau_alpha")
    assert len(simbert.outputs) == 2


def test_pooler_weights_round_trip_through_checkpoint(tmp_path):
    config, _ = random_checkpoint(str(tmp_path))
    original = build_transformer_model(config, with_pool=True, return_keras_model=False, model="gau_alpha")
    ckpt = original.save_weights_as_checkpoint(str(tmp_path / "pooled" / "model.ckpt"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checkpoint has the pooler: nothing to warn about
        again = build_transformer_model(config, ckpt, with_pool=True, model="gau_alpha")
    np.testing.assert_allclose(
        again.predict([IDS, SEGMENTS], verbose=0), original.model.predict([IDS, SEGMENTS], verbose=0), atol=1e-6
    )


def test_segment_vocab_size_zero_has_token_input_only():
    model = build_transformer_model(segment_vocab_size=0, **SMALL, model="gau_alpha")
    assert [x.name for x in model.inputs] == ["Input-Token"]
    assert "Embedding-Segment" not in {layer.name for layer in model.layers}
    assert model.predict(IDS, verbose=0).shape == (2, 8, 16)
    with pytest.raises(ValueError, match="segment_vocab_size"):
        build_transformer_model(segment_vocab_size=0, application="unilm", **SMALL, model="gau_alpha")


@pytest.mark.parametrize("cls", [GAU_alpha, RoFormerV2])
def test_custom_position_ids_are_the_rotary_positions(cls):
    keras.utils.set_random_seed(1)
    t = build_transformer_model(
        model=cls, custom_position_ids=True, num_attention_heads=2, return_keras_model=False, **SMALL
    )
    assert [x.name for x in t.inputs] == ["Input-Token", "Input-Segment", "Input-Position"]
    plain = build_transformer_model(model=cls, num_attention_heads=2, **SMALL)
    plain.set_weights(t.model.get_weights())
    positions = np.tile(np.arange(8), (2, 1))
    expected = plain.predict([IDS, SEGMENTS], verbose=0)
    run = lambda p: t.model.predict([IDS, SEGMENTS, p], verbose=0)  # noqa: E731
    np.testing.assert_allclose(run(positions), expected, atol=1e-5)
    np.testing.assert_allclose(run(positions + 7), expected, atol=1e-4)  # rotary: only differences count
    assert np.abs(run(positions[:, ::-1].copy()) - expected).max() > 1e-3


def test_prefix_and_layer_sharing():
    a = build_transformer_model(prefix="Predecessor-", return_keras_model=False, **SMALL, model="gau_alpha")
    b = build_transformer_model(prefix="Successor-", return_keras_model=False, **SMALL, model="gau_alpha")
    assert a.inputs[0].name == "Predecessor-Input-Token"
    assert "Successor-Transformer-0-GatedAttentionUnit" in b.layers and not set(a.layers) & set(b.layers)
    shared = build_transformer_model(
        layers=a.layers, prefix="Predecessor-", name="again", return_keras_model=False, **SMALL, model="gau_alpha"
    )
    assert shared.model.name == "again"
    assert shared.model.get_layer("Predecessor-Embedding-Token") is a.model.get_layer("Predecessor-Embedding-Token")
    np.testing.assert_allclose(
        shared.model.predict([IDS, SEGMENTS], verbose=0), a.model.predict([IDS, SEGMENTS], verbose=0), atol=1e-6
    )
    # BERT-of-Theseus style: run a's layers again on the same inputs
    x = a.apply_embeddings(a.inputs)
    x = a.apply_main_layers(x, 0)
    np.testing.assert_allclose(
        keras.Model(a.inputs, x).predict([IDS, SEGMENTS], verbose=0),
        a.model.predict([IDS, SEGMENTS], verbose=0),
        atol=1e-6,
    )


def test_additional_input_layers():
    extra = keras.Input(shape=(3,), name="Input-Condition")
    t = build_transformer_model(additional_input_layers=extra, return_keras_model=False, **SMALL, model="gau_alpha")
    assert t.inputs[-1] is extra and len(t.model.inputs) == 3


@pytest.mark.parametrize(
    "argument, value, message",
    [
        ("with_nsp", True, "no next-sentence head"),
        ("hierarchical_position", 0.4, "rotary positions"),
        ("shared_segment_embeddings", True, "first-segment"),
        ("residual_attention_scores", True, "RealFormer"),
        ("layer_norm_cond", "anything", "parameter-free"),
        ("attention_caches", {"x": 1}, "recomputes the prefix"),
        ("unused_checkpoint_variables", "maybe", "'warn', 'error', 'ignore'"),
    ],
)
def test_options_that_do_not_apply_are_refused_with_the_reason(argument, value, message):
    with pytest.raises(ValueError, match=message) as info:
        build_transformer_model(**{argument: value}, **SMALL, model="gau_alpha")
    assert argument in str(info.value)


def test_unknown_models_and_srupp_pooler_are_refused():
    with pytest.raises(ValueError, match="unknown model 't6'"):
        build_transformer_model(model="t6", **SMALL)
    with pytest.raises(ValueError, match="SRUppModel has no pooler"):
        build_transformer_model(
            model="srupp", application="lm", with_pool=True, vocab_size=30, hidden_size=8, num_hidden_layers=1
        )
    with pytest.raises(TypeError, match="hiden_size"):
        build_transformer_model(
            hiden_size=3, **{k: v for k, v in TINY_GAU.items() if k != "hidden_size"}, model="gau_alpha"
        )


def test_extend_with_language_model_factories():
    from gau_keras.models import extend_with_language_model, extend_with_unified_language_model

    lm = build_transformer_model(model=extend_with_language_model(GAU_alpha), return_keras_model=False, **SMALL)
    assert lm.application == "lm" and lm.with_mlm and "Attention-LM-Mask" in lm.layers
    unilm = build_transformer_model(
        model=extend_with_unified_language_model(RoFormerV2), return_keras_model=False, num_attention_heads=2, **SMALL
    )
    assert unilm.application == "unilm" and "Attention-UniLM-Mask" in unilm.layers
    assert unilm.model.output.shape == (None, None, 60)


TINY_BACKBONE = dict(vocab_size=60, hidden_size=16, num_hidden_layers=1, intermediate_size=24, attention_key_size=8)


@pytest.mark.parametrize(
    "backbone, overrides, message",
    [
        (
            "GAUAlphaBackbone",
            {"num_hidden_layers": -3},
            "GAUAlphaBackbone: num_hidden_layers must be an integer >= 1, got -3",
        ),
        (
            "RoformerV2Backbone",
            {"num_attention_heads": 3},
            "RoformerV2Backbone: hidden_size=16 is not divisible by num_attention_heads=3",
        ),
        (
            "BertBackbone",
            {"hidden_size": 0, "num_attention_heads": 1, "hidden_act": "gelu"},
            "BertBackbone: hidden_size must be an integer >= 1, got 0",
        ),
        (
            "SRUppBackbone",
            {"with_mlm": "softmax2"},
            "SRUppBackbone: with_mlm must be True, False or the name of a Keras activation",
        ),
        ("GAUAlphaBackbone", {"hiden_size": 16}, r"GAUAlphaBackbone: unknown argument\(s\) \['hiden_size'\]"),
        ("BertBackbone", {}, r"BertBackbone: missing required argument\(s\) \['num_attention_heads', 'hidden_act'\]"),
    ],
)
def test_backbones_check_their_arguments_as_the_builder_does(backbone, overrides, message):
    from gau_keras import models
    from gau_keras.models.config import ConfigError

    with pytest.raises(ConfigError, match=f"^{message}"):
        getattr(models, backbone)(**{**TINY_BACKBONE, **overrides})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("num_hidden_layers", -3, "GAUAlphaBackbone: num_hidden_layers must be an integer >= 1, got -3"),
        ("hidden_size", 0, "GAUAlphaBackbone: hidden_size must be an integer >= 1, got 0"),
        ("bogus_key", 1, r"GAUAlphaBackbone: unknown argument\(s\) \['bogus_key'\]"),
    ],
)
def test_a_keras_file_with_a_bad_or_unknown_config_key_names_it(tmp_path, key, value, message):
    import json
    import zipfile

    from gau_keras.models import GAUAlphaBackbone
    from gau_keras.models.config import ConfigError

    path, crafted = tmp_path / "ok.keras", tmp_path / "crafted.keras"
    GAUAlphaBackbone(**TINY_BACKBONE).save(path)
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(crafted, "w") as target:
        for item in source.namelist():
            data = source.read(item)
            if item == "config.json":
                config = json.loads(data)
                config["config"][key] = value
                data = json.dumps(config)
            target.writestr(item, data)
    with pytest.raises(ConfigError, match=f"^{message}"):
        keras.saving.load_model(crafted)


@pytest.mark.parametrize("model", ["gau_alpha", "bert", "srupp"])
@pytest.mark.parametrize("with_mlm", ["softmax2", 3, 1.0])
def test_a_bad_with_mlm_names_the_argument_and_the_accepted_values(model, with_mlm):
    from gau_keras.models.config import ConfigError

    arguments = {**TINY_BACKBONE, "num_attention_heads": 2, "hidden_act": "gelu"} if model == "bert" else TINY_BACKBONE
    with pytest.raises(
        ConfigError,
        match=r"with_mlm must be True, False or the name of a Keras activation .*'linear'.*"
        f"got {with_mlm!r}",
    ) as info:
        build_transformer_model(model=model, with_mlm=with_mlm, **arguments)
    assert {"gau_alpha": "GAU_alpha", "bert": "BERT", "srupp": "SRUppModel"}[model] in str(info.value)
    assert "\n" not in str(info.value)


def test_hidden_size_zero_names_hidden_size_and_the_model():
    from gau_keras.models.config import ConfigError

    with pytest.raises(ConfigError, match="^GAU_alpha: hidden_size must be an integer >= 1, got 0$"):
        build_transformer_model(model="gau_alpha", **{**TINY_BACKBONE, "hidden_size": 0})


@pytest.mark.parametrize("preset", [None, 3])
def test_from_preset_of_none_is_a_one_line_error(preset):
    from gau_keras.models import GAUAlphaBackbone

    with pytest.raises(
        TypeError,
        match=r"^GAUAlphaBackbone.from_preset: preset must be a preset name "
        rf"\(\['gau_alpha_tiny'\]\) or a model directory, got {preset}$",
    ):
        GAUAlphaBackbone.from_preset(preset)
