"""gau_keras.models.registry: every model name and alias leads to its builder class and Backbone;
a Backbone resolves and checks its arguments as build_transformer_model does; from_preset builds
without the builder; command lines list the registry's names."""

import argparse
import ast

import numpy as np
import pytest

from gau_keras import flags
from gau_keras.models import (
    BERT,
    GAU_alpha,
    GAUAlphaBackbone,
    RoFormerV2,
    build_transformer_model,
    registry,
)
from gau_keras.models.config import ConfigError, UnknownArgumentError
from gau_keras.models.gpt import GPT, GPT2, GPT2_ML
from tests.conftest import REPO_ROOT
from tests.model_utils import TINY, random_checkpoint

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

TINY_GAU_ARGUMENTS = dict(
    vocab_size=60, hidden_size=16, num_hidden_layers=1, intermediate_size=24, attention_key_size=8
)


@pytest.mark.parametrize("name", sorted(registry.MODELS))
def test_every_registered_name_resolves_in_any_case_to_a_class_with_a_backbone(name):
    cls = registry.resolve_model_class(name)
    assert cls is registry.MODELS[name] is registry.resolve_model_class(name.upper())
    assert registry.backbone_class(cls).transformer_class is cls


def test_the_bert4keras_names_and_their_aliases():
    aliases = {
        "bert": BERT,
        "roberta": BERT,
        "gau_alpha": GAU_alpha,
        "gau-alpha": GAU_alpha,
        "roformer_v2": RoFormerV2,
        "roformer-v2": RoFormerV2,
        "roformerv2": RoFormerV2,
        "gpt": GPT,
        "gpt2": GPT2,
        "gpt2_ml": GPT2_ML,
    }
    assert {name: registry.resolve_model_class(name) for name in aliases} == aliases
    assert registry.model_names() == (
        "bert",
        "albert",
        "albert_unshared",
        "nezha",
        "roformer",
        "electra",
        "gau_alpha",
        "roformer_v2",
        "srupp",
        "gpt",
        "gpt2",
        "gpt2_ml",
        "t5",
        "t5_encoder",
        "t5_decoder",
    )
    assert registry.resolve_model_class(GAU_alpha) is GAU_alpha


def test_an_unknown_name_is_said_to_be_unknown():
    with pytest.raises(ValueError, match="unknown model 'gau_beta'"):
        registry.resolve_model_class("gau_beta")


def test_the_registry_is_read_only_and_a_taken_name_cannot_be_registered_again():
    with pytest.raises(TypeError):
        registry.MODELS["bert"] = GAU_alpha
    with pytest.raises(ValueError, match="'roberta' is already registered to BERT"):
        registry.register("roberta")(GAU_alpha)
    assert registry.MODELS["roberta"] is BERT


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"hiden_size": 16}, UnknownArgumentError, r"unknown argument\(s\) \['hiden_size'\]"),
        ({"hidden_size": 0}, ConfigError, "hidden_size must be an integer >= 1, got 0"),
        ({"attention_probs_dropout_prob": 1.5}, ConfigError, "attention_dropout_rate must be a number in"),
        ({"num_hidden_layers": None}, ConfigError, r"missing required argument\(s\) \['num_hidden_layers'\]"),
    ],
)
def test_a_backbone_and_the_builder_raise_the_same_named_error(overrides, error, message):
    arguments = {k: v for k, v in {**TINY_GAU_ARGUMENTS, **overrides}.items() if v is not None}
    with pytest.raises(error, match=f"^GAUAlphaBackbone: .*{message}"):
        GAUAlphaBackbone(**arguments)
    with pytest.raises(error, match=f"^GAU_alpha: .*{message}"):
        build_transformer_model(model="gau_alpha", **arguments)


def test_an_unknown_argument_is_a_type_error_as_python_s_own():
    with pytest.raises(TypeError, match="hiden_size"):
        GAUAlphaBackbone(hiden_size=3, **TINY_GAU_ARGUMENTS)


def test_a_backbone_maps_the_bert_config_names_as_the_builder_does():
    aliases = dict(
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.2,
        max_position_embeddings=64,
        type_vocab_size=3,
        layer_norm_eps=1e-6,
    )
    backbone = GAUAlphaBackbone(**TINY_GAU_ARGUMENTS, **aliases)
    built = build_transformer_model(model="gau_alpha", return_keras_model=False, **TINY_GAU_ARGUMENTS, **aliases)
    for attribute in (
        "dropout_rate",
        "attention_dropout_rate",
        "max_position",
        "segment_vocab_size",
        "layer_norm_epsilon",
    ):
        assert getattr(backbone.transformer, attribute) == getattr(built, attribute), attribute
    assert backbone.transformer.segment_vocab_size == 3 and backbone.transformer.dropout_rate == 0.1
    config = backbone.get_config()
    assert config["dropout_rate"] == 0.1 and "hidden_dropout_prob" not in config


def test_from_preset_builds_the_backbone_without_the_builder(tmp_path, monkeypatch):
    from gau_keras.models import builder

    directory = tmp_path / "gau"
    random_checkpoint(str(directory), model="gau_alpha", heads={"with_mlm": True})
    (directory / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(60)) + "\n", encoding="utf-8")
    reference = build_transformer_model(
        str(directory / "bert_config.json"), str(directory / "bert_model.ckpt"), model="gau_alpha", with_mlm=True
    )

    def refuse(*args, **kwargs):
        raise AssertionError("from_preset went through build_transformer_model")

    monkeypatch.setattr(builder, "build_transformer_model", refuse)
    backbone = GAUAlphaBackbone.from_preset(str(directory), with_mlm=True)
    assert isinstance(backbone, GAUAlphaBackbone) and backbone.transformer.num_hidden_layers == 2
    ids = np.array([[2, 9, 14, 33, 5, 3, 0, 0]])
    np.testing.assert_allclose(
        backbone.predict([ids, np.zeros_like(ids)], verbose=0),
        reference.predict([ids, np.zeros_like(ids)], verbose=0),
        atol=1e-6,
    )
    unloaded = GAUAlphaBackbone.from_preset(str(directory), load_weights=False)
    assert unloaded.get_config()["hidden_size"] == TINY["gau_alpha"]["hidden_size"]


def test_nothing_under_models_imports_the_builder_or_pretrained():
    importers = []
    for path in sorted((REPO_ROOT / "gau_keras" / "models").rglob("*.py")):
        if path.name == "builder.py" or path.name == "__init__.py" and path.parent.name == "models":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("gau_keras.models.builder", "gau_keras.pretrained"):
                importers.append(f"{path.relative_to(REPO_ROOT)}: {node.module}")
    assert not importers


def test_the_command_line_choices_come_from_the_registry(monkeypatch):
    monkeypatch.setitem(registry._MODELS, "tiny_gau", GAU_alpha)
    parser = argparse.ArgumentParser()
    flags.add_model_option(parser)
    action = next(a for a in parser._actions if a.dest == "model")
    assert set(action.choices) == set(registry.MODELS)
    assert action.metavar == "{" + ",".join(registry.model_names()) + "}"
    assert parser.parse_args(["--model", "TINY_GAU"]).model == "tiny_gau"
