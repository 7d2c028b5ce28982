"""The BERT family's builders (gau_keras/models/bert, albert, nezha, roformer, electra) and the
Backbone classes: what bert4keras's parity tests (test_bert4keras_parity_encoders.py) do not
cover — bad input, the layers' sharing, checkpoints that do not fit, configs and presets."""

import json

import keras
import numpy as np
import pytest

from gau_keras import build_transformer_model, checkpoints
from gau_keras.models import (
    BACKBONES,
    BERT,
    ALBERT_Unshared,
    AlbertBackbone,
    AlbertUnsharedBackbone,
    Backbone,
    BertBackbone,
    ElectraBackbone,
    GAUAlphaBackbone,
    NezhaBackbone,
    RoformerBackbone,
)
from gau_keras.models.config import read_config
from tests.harness import SEGMENT_IDS, TOKEN_IDS, run_backbone_test
from tests.model_utils import TINY, random_checkpoint, write_config

pytestmark = pytest.mark.both_backends

IDS = np.array([[2, 5, 7, 9, 3, 0], [2, 4, 3, 8, 11, 3]])
SEGMENTS = np.array([[0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1]])


def test_bert_is_the_default_model_and_roberta_its_alias():
    bert = build_transformer_model(**TINY["bert"], return_keras_model=False)
    roberta = build_transformer_model(**TINY["bert"], model="roberta", return_keras_model=False)
    assert type(bert).__name__ == type(roberta).__name__ == "BERT"
    assert isinstance(bert.model, BertBackbone) and bert.model.transformer is bert
    assert [w.path for w in bert.model.weights] == [w.path for w in roberta.model.weights]


def test_albert_shares_one_block_and_albert_unshared_has_one_per_layer():
    albert = build_transformer_model(**TINY["albert"], model="albert", return_keras_model=False)
    unshared = build_transformer_model(**TINY["albert"], model="albert_unshared", return_keras_model=False)
    assert "Transformer-MultiHeadSelfAttention" in albert.layers and "Transformer-0-FeedForward" not in albert.layers
    assert {"Transformer-0-FeedForward", "Transformer-1-FeedForward"} <= set(unshared.layers)
    assert len(unshared.model.weights) > len(albert.model.weights)
    assert albert.model.get_layer("Embedding-Mapping").kernel.shape == (8, 16)  # embedding_size -> hidden


def test_albert_unshared_reads_the_shared_group_into_every_layer_and_writes_it_back_only_if_equal(tmp_path):
    _, ckpt = random_checkpoint(str(tmp_path / "albert"), model="albert")
    unshared = build_transformer_model(
        str(tmp_path / "albert" / "bert_config.json"), ckpt, model="albert_unshared", return_keras_model=False
    )
    first, second = (unshared.layers[f"Transformer-{i}-FeedForward"].o_dense.kernel for i in (0, 1))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(first), keras.ops.convert_to_numpy(second))
    again = unshared.save_weights_as_checkpoint(str(tmp_path / "again" / "bert_model.ckpt"))
    assert checkpoints.CheckpointReader(again).shapes == checkpoints.CheckpointReader(ckpt).shapes
    second.assign(keras.ops.convert_to_numpy(second) + 1.0)
    with pytest.raises(checkpoints.CheckpointError, match="Transformer-0-FeedForward.*Transformer-1-FeedForward"):
        unshared.save_weights_as_checkpoint(str(tmp_path / "trained" / "bert_model.ckpt"))
    assert isinstance(unshared, ALBERT_Unshared)


def test_a_gau_alpha_checkpoint_loaded_as_the_default_model_names_the_fix(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path), model="gau_alpha")
    with pytest.raises(checkpoints.CheckpointError, match=r"load it with model='gau_alpha'"):
        build_transformer_model(config, ckpt, num_attention_heads=1, intermediate_size=24, hidden_act="swish")


def test_an_albert_checkpoint_loaded_as_bert_names_albert(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path), model="albert")
    with pytest.raises(
        checkpoints.CheckpointError,
        match=r"ALBERT's shared layer group: load it with "
        r"model='albert'",
    ):
        build_transformer_model(config, ckpt)


def test_a_missing_variable_and_a_wrong_shape_name_layer_variable_and_file(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path), model="bert")
    with pytest.raises(
        checkpoints.CheckpointError,
        match=r"layer 'Pooler-Dense'.*'bert/pooler/dense/kernel' is "
        r"missing from '.*bert_model.ckpt'",
    ):
        build_transformer_model(config, ckpt, with_pool=True)
    with pytest.raises(
        checkpoints.CheckpointError,
        match=r"layer 'Embedding-Position'.*\(32, 16\).*"
        r"'bert/embeddings/position_embeddings'.*\(64, 16\)",
    ):
        build_transformer_model(config, ckpt, max_position=32)


def test_bad_input_is_refused_as_bert4keras_refuses_it(tmp_path):
    with pytest.raises(ValueError, match=r"unknown model 'bret'; expected one of \[.*'albert'.*'bert'"):
        build_transformer_model(**TINY["bert"], model="bret")
    config = write_config(str(tmp_path), {k: v for k, v in TINY["bert"].items() if k != "intermediate_size"})
    with pytest.raises(ValueError, match=r"config '.*bert_config.json' lacks \['intermediate_size'\]"):
        build_transformer_model(config)
    for option in ("with_pool", "with_mlm"):
        with pytest.raises(TypeError, match=f"ELECTRA got an unexpected keyword argument '{option}'"):
            build_transformer_model(**TINY["electra"], model="electra", **{option: True})
    with pytest.raises(ValueError, match="ELECTRA can not be used as an 'lm' model"):
        build_transformer_model(**TINY["electra"], model="electra", application="lm")
    with pytest.raises(ValueError, match="hierarchical_position.*NEZHA has none"):
        build_transformer_model(**TINY["bert"], model="nezha", hierarchical_position=True)
    with pytest.raises(ValueError, match="residual_attention_scores=True with application='lm'"):
        build_transformer_model(**TINY["bert"], residual_attention_scores=True, application="lm")
    with pytest.raises(ValueError, match="max_relative_position must be an integer >= 1"):
        build_transformer_model(**TINY["bert"], model="nezha", max_relative_position=0)


def test_with_nsp_puts_the_pooler_under_the_next_sentence_head_and_outputs_keep_bert4keras_order():
    model = build_transformer_model(**TINY["bert"], with_nsp=True, with_mlm="linear")
    nsp, mlm = model.predict([IDS, SEGMENTS], verbose=0)
    assert nsp.shape == (2, 2) and mlm.shape == (2, 6, 60)
    np.testing.assert_allclose(nsp.sum(-1), 1.0, rtol=1e-5)
    assert model.get_layer("NSP-Proba").input is model.get_layer("Pooler-Dense").output


def test_nezha_relative_positions_are_a_fixed_sinusoidal_table_outside_the_checkpoint():
    nezha = build_transformer_model(**TINY["bert"], model="nezha", max_relative_position=3, return_keras_model=False)
    table = nezha.layers["Embedding-Relative-Position"]
    assert not table.trainable and tuple(table.embeddings.shape) == (7, 8)
    values = keras.ops.convert_to_numpy(table.embeddings)
    np.testing.assert_allclose(values[2, 0::2], np.sin(2 / 10000 ** (np.arange(4) * 2 / 8)), atol=1e-6)
    names = {name for variables in nezha.variable_mapping().values() for name in variables.values()}
    assert not any("relative" in name for name in names) and "Embedding-Position" not in nezha.layers


def test_conditional_layer_norm_conditions_every_norm():
    cond = keras.Input((3,), name="Condition")
    transformer = build_transformer_model(
        **TINY["bert"],
        layer_norm_cond=cond,
        layer_norm_cond_hidden_size=4,
        layer_norm_cond_hidden_act="tanh",
        additional_input_layers=cond,
        return_keras_model=False,
    )
    norms = [layer for name, layer in transformer.layers.items() if name.endswith("Norm")]
    assert len(norms) == 5 and all(norm.conditional and norm.hidden_units == 4 for norm in norms)
    assert not isinstance(transformer.model, Backbone)  # a tensor argument: a plain Model
    base = transformer.model.predict([IDS, SEGMENTS, np.zeros((2, 3))], verbose=0)
    for norm in norms:
        norm.gamma_dense.kernel.assign(np.ones(norm.gamma_dense.kernel.shape))
    moved = transformer.model.predict([IDS, SEGMENTS, np.ones((2, 3))], verbose=0)
    assert np.abs(moved - base).max() > 1e-2


def test_every_registered_builder_has_a_backbone_whose_config_rebuilds_it():
    assert {cls.__name__ for cls in BACKBONES} >= {
        "BERT",
        "ALBERT",
        "ALBERT_Unshared",
        "NEZHA",
        "RoFormer",
        "ELECTRA",
        "RoFormerV2",
        "GAU_alpha",
        "SRUppModel",
    }
    backbone = NezhaBackbone(**read_config(TINY["bert"]), with_mlm=True, keep_tokens=np.arange(40))
    config = backbone.get_config()
    assert config["keep_tokens"] == list(range(40)) and json.dumps(config)
    again = NezhaBackbone.from_config(config)
    assert [w.path for w in again.weights] == [w.path for w in backbone.weights]
    assert again.output.shape == (None, None, 40)


def test_from_preset_takes_the_bundled_name_or_a_model_directory(tmp_path):
    bundled = GAUAlphaBackbone.from_preset("gau_alpha_tiny")
    assert isinstance(bundled, GAUAlphaBackbone) and bundled.transformer.num_hidden_layers >= 1
    directory = tmp_path / "bert"
    random_checkpoint(str(directory), model="bert", heads={"with_mlm": True})
    (directory / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(60)) + "\n", encoding="utf-8")
    model = BertBackbone.from_preset(str(directory), with_mlm=True)
    reference = build_transformer_model(
        str(directory / "bert_config.json"), str(directory / "bert_model.ckpt"), with_mlm=True
    )
    np.testing.assert_allclose(
        model.predict([IDS, SEGMENTS], verbose=0), reference.predict([IDS, SEGMENTS], verbose=0), atol=1e-6
    )
    with pytest.raises(ValueError, match=r"'nope' is neither a preset of this class \(\['gau_alpha_tiny'\]\)"):
        GAUAlphaBackbone.from_preset("nope")


def test_checkpoint_hints_name_the_model_the_checkpoint_fits(tmp_path):
    config, roformer = random_checkpoint(str(tmp_path / "roformer"), model="roformer")
    with pytest.raises(
        checkpoints.CheckpointError,
        match=r"no position embeddings: load it with model='roformer' "
        r"or model='nezha'",
    ):
        build_transformer_model(config, roformer)  # BERT wants bert/embeddings/position_embeddings
    config, v2 = random_checkpoint(str(tmp_path / "v2"), model="roformer_v2")
    with pytest.raises(checkpoints.CheckpointError, match=r"without LayerNorm: load it with model='roformer_v2'"):
        build_transformer_model(config, v2, model="roformer", hidden_act="gelu")
    _, bert = random_checkpoint(str(tmp_path / "bert"), model="bert")

    class MyBERT(BERT):
        pass

    with pytest.raises(checkpoints.CheckpointError) as error:  # a shape error, and no advice for one's own class
        build_transformer_model({**TINY["bert"], "hidden_size": 8}, bert, model=MyBERT)
    assert "has shape" in str(error.value) and "load it with" not in str(error.value)


def test_a_backbone_config_keeps_weighted_compound_tokens(tmp_path):
    compound = [[3, 4], ([5, 6], [0.25, 0.75])]
    backbone = BertBackbone(**read_config(TINY["bert"]), compound_tokens=compound)
    config = json.loads(json.dumps(backbone.get_config()))
    again = BertBackbone.from_config(config)
    assert again.transformer.compound_tokens == compound
    _, ckpt = random_checkpoint(str(tmp_path), model="bert")
    again.transformer.load_weights_from_checkpoint(ckpt)
    rows = keras.ops.convert_to_numpy(again.get_layer("Embedding-Token").embeddings)
    table = checkpoints.CheckpointReader(ckpt).get("bert/embeddings/word_embeddings")
    np.testing.assert_allclose(rows[-1], 0.25 * table[5] + 0.75 * table[6], atol=1e-6)


def test_options_bert4keras_accepts_as_off_are_accepted():
    build_transformer_model(**TINY["bert"], model="electra", with_nsp=False)
    build_transformer_model(**TINY["bert"], model="nezha", hierarchical_position=False)
    with pytest.raises(ValueError, match="ELECTRA has no next-sentence head"):
        build_transformer_model(**TINY["bert"], model="electra", with_nsp=True)


def test_heads_compute_in_float32_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = build_transformer_model(**TINY["bert"], with_nsp=True, with_mlm="linear")
        electra = build_transformer_model(**TINY["electra"], model="electra", with_discriminator=True)
    finally:
        keras.config.set_dtype_policy("float32")
    assert [output.dtype for output in model.outputs] == ["float32", "float32"]
    assert model.get_layer("MLM-Bias").output.dtype == "float32" and electra.output.dtype == "float32"


def test_a_release_folder_with_its_own_config_name_is_read(tmp_path):
    from gau_keras.models import AlbertBackbone
    from gau_keras.pretrained import model_files

    directory = tmp_path / "albert_tiny_zh"
    random_checkpoint(str(directory), model="albert")
    (directory / "bert_config.json").rename(directory / "albert_config.json")  # albert_zh's name
    (directory / "vocab.txt").write_text("\n".join(f"t{i}" for i in range(60)) + "\n", encoding="utf-8")
    assert model_files(directory)[0].endswith("albert_config.json")
    assert isinstance(AlbertBackbone.from_preset(str(directory)), AlbertBackbone)
    (directory / "other_config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"several config files \['albert_config.json', 'other_config.json'\]"):
        model_files(directory)


#: run by the original bert4keras: a small random BERT saved as a checkpoint, then loaded into a wider
#: and deeper-FFN one with autoresize_weights=True; ``outputs``: the small checkpoint's variables and
#: the resized model's MLM logits on ``inputs``
AUTORESIZE = """
import os
import tempfile

from bert4keras.models import build_transformer_model

small = build_transformer_model(None, model='bert', with_mlm='linear', return_keras_model=False, **%(small)r)
noise = np.random.RandomState(3)
K.batch_set_value([(w, v + 0.05 * noise.randn(*v.shape).astype(v.dtype))
                   for w, v in zip(small.model.weights, K.batch_get_value(small.model.weights))])
with tempfile.TemporaryDirectory() as folder:
    prefix = os.path.join(folder, 'bert_model.ckpt')
    small.save_weights_as_checkpoint(prefix)
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_shape_map():
        outputs['ckpt:' + name] = reader.get_tensor(name)
    big = build_transformer_model(None, prefix, model='bert', with_mlm='linear', autoresize_weights=True,
                                  **%(big)r)
outputs['logits'] = big.predict([inputs['token_ids'], inputs['segment_ids']])
"""


@pytest.mark.parametrize("hidden_act", ["gelu", "relu"])
def test_autoresize_weights_equals_bert4keras(hidden_act):
    from tests.reference.harness import run_bert4keras_code

    small = dict(
        vocab_size=60,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        hidden_act=hidden_act,
        max_position=32,
    )
    big = dict(small, hidden_size=32, intermediate_size=48)
    ids = np.array([[2, 5, 7, 9, 3, 0, 0, 0], [2, 4, 3, 8, 11, 13, 17, 3]], "float32")
    segments = np.array([[0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1]], "float32")
    reference = run_bert4keras_code(
        AUTORESIZE % {"small": small, "big": big}, {"token_ids": ids, "segment_ids": segments}, graph=True, seed=3
    )
    checkpoint = {name[len("ckpt:") :]: value for name, value in reference.items() if name.startswith("ckpt:")}
    ours = build_transformer_model(None, checkpoint, with_mlm="linear", autoresize_weights=True, **big)
    np.testing.assert_allclose(ours.predict([ids, segments], verbose=0), reference["logits"], atol=1e-4)


#: each BERT-family Backbone with the options that add layers (heads, pooler, causal or UniLM masks)
HARNESSED = {
    "bert": {"with_nsp": True, "with_mlm": True},
    "albert": {"application": "unilm"},
    "albert_unshared": {"with_pool": "linear"},
    "nezha": {"with_mlm": True},
    "roformer": {"application": "lm"},
    "electra": {"with_discriminator": True},
}


def _harness_arguments(model):
    return {**TINY[model], **HARNESSED[model]}


def test_bert_backbone_passes_the_backbone_harness():
    run_backbone_test(BertBackbone, _harness_arguments("bert"), [TOKEN_IDS, SEGMENT_IDS], [(2, 2), (2, 8, 60)])


def test_albert_backbone_passes_the_backbone_harness():
    run_backbone_test(AlbertBackbone, _harness_arguments("albert"), [TOKEN_IDS, SEGMENT_IDS], (2, 8, 60))


def test_albert_unshared_backbone_passes_the_backbone_harness():
    run_backbone_test(
        AlbertUnsharedBackbone,
        _harness_arguments("albert_unshared"),
        [TOKEN_IDS, SEGMENT_IDS],
        (2, 16),
        checkpoint_writer=AlbertBackbone,
    )


def test_nezha_backbone_passes_the_backbone_harness():
    run_backbone_test(NezhaBackbone, _harness_arguments("nezha"), [TOKEN_IDS, SEGMENT_IDS], (2, 8, 60))


def test_roformer_backbone_passes_the_backbone_harness():
    run_backbone_test(RoformerBackbone, _harness_arguments("roformer"), [TOKEN_IDS, SEGMENT_IDS], (2, 8, 60))


def test_electra_backbone_passes_the_backbone_harness():
    run_backbone_test(ElectraBackbone, _harness_arguments("electra"), [TOKEN_IDS, SEGMENT_IDS], (2, 8, 1))
