"""Hugging Face model directories loaded by build_transformer_model and Backbone.from_preset
(gau_keras.models.huggingface): the outputs of tiny random models match those transformers
computed (tests/fixtures/hf/, written by tests/fixtures/make_hf_fixtures.py), without torch."""

import importlib.util
import json
import pathlib
import shutil

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from gau_keras import hf_weights
from gau_keras.errors import CheckpointError, ConfigError
from gau_keras.models.albert.model import AlbertBackbone
from gau_keras.models.bert.model import BertBackbone
from gau_keras.models.builder import build_transformer_model
from gau_keras.models.electra.model import ElectraBackbone
from gau_keras.models.gpt.model import GPT2Backbone
from gau_keras.models.huggingface import hf_checkpoint, hf_export, is_hf_directory
from gau_keras.models.roformer.model import RoformerBackbone
from gau_keras.models.t5.model import T5Backbone

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"
BACKBONES = {
    "bert": BertBackbone,
    "roberta": BertBackbone,
    "albert": AlbertBackbone,
    "electra": ElectraBackbone,
    "roformer": RoformerBackbone,
    "gpt2": GPT2Backbone,
}
#: the head whose logits transformers' reference holds
HEADS = {"electra": {"with_discriminator": "linear"}, "gpt2": {}}
#: the largest |ours - transformers'| over real tokens, relative to the largest |transformers'|
TOLERANCE = 1e-4


def _reference(arch):
    reference = np.load(FIXTURES / arch / "reference.npz")
    ids, segments = reference["token_ids"], reference["segment_ids"]
    return ([ids] if arch == "gpt2" else [ids, segments]), ids != 0, reference


def _relative_error(ours, theirs, real):
    return float(np.abs(np.asarray(ours) - theirs)[real].max() / np.abs(theirs[real]).max())


def _centred(logits):
    """Logits less their mean over the vocabulary: what log-probabilities determine."""
    return logits - logits.mean(-1, keepdims=True)


def _errors(arch, directory, model=None):
    """(hidden, logits) relative errors of our model read from ``directory`` (a copy of the
    ``arch`` fixture) against transformers' outputs: MLM logits, ELECTRA's discriminator logits,
    GPT2's logits from its LM distribution."""
    inputs, real, reference = _reference(arch)
    model = model or build_transformer_model(checkpoint_path=directory, model=None)
    if arch == "gpt2":
        hidden = keras.Model(model.inputs, model.get_layer("Output-Norm").output).predict(inputs, verbose=0)
        logits = _centred(np.log(model.predict(inputs, verbose=0)))
        expected = _centred(reference["logits"])
    else:
        hidden = model.predict(inputs, verbose=0)
        head = build_transformer_model(checkpoint_path=directory, model=None, **HEADS.get(arch, {"with_mlm": "linear"}))
        expected = reference["logits"]
        logits = head.predict(inputs, verbose=0).reshape(expected.shape)  # ELECTRA's [B, L, 1]
    return _relative_error(hidden, reference["hidden"], real), _relative_error(logits, expected, real)


def _check_outputs(arch, directory, model=None):
    hidden, logits = _errors(arch, directory, model)
    assert hidden < TOLERANCE and logits < TOLERANCE, (hidden, logits)


def _copy(arch, tmp_path, weights=("model.safetensors",)):
    """The fixture of ``arch`` in a folder of its own with only ``weights`` as its weights."""
    directory = tmp_path / arch
    directory.mkdir()
    for name in ("config.json", "vocab.txt", *weights):
        shutil.copy(FIXTURES / arch / name, directory)
    return directory


@pytest.mark.both_backends
@pytest.mark.parametrize("arch", sorted(BACKBONES))
def test_safetensors_directories_give_transformers_outputs(arch):
    _check_outputs(arch, FIXTURES / arch)


@pytest.mark.both_backends
@pytest.mark.parametrize("arch", sorted(BACKBONES))
def test_pytorch_model_bin_without_torch_gives_transformers_outputs(arch, tmp_path, monkeypatch):
    def no_torch(path):
        raise AssertionError("torch.load was used")

    monkeypatch.setattr(hf_weights, "_read_with_torch", no_torch)
    monkeypatch.setattr(hf_weights.importlib.util, "find_spec", lambda name: None)
    _check_outputs(arch, _copy(arch, tmp_path, ("pytorch_model.bin",)))


def _t5_errors(arch, directory, model=None):
    """(encoder hidden, decoder logits) relative errors of a T5 / mT5 read from ``directory``."""
    reference = np.load(FIXTURES / arch / "reference.npz")
    ids, decoder_ids = reference["token_ids"], reference["decoder_ids"]
    model = model or build_transformer_model(checkpoint_path=directory, model=None)
    encoder = keras.Model(model.inputs[0], model.get_layer("Encoder-Output-Norm").output)
    hidden = _relative_error(encoder.predict(ids, verbose=0), reference["encoder_hidden"], ids != 0)
    logits = _centred(np.log(model.predict([ids, decoder_ids], verbose=0)))
    return hidden, _relative_error(logits, _centred(reference["logits"]), np.ones(decoder_ids.shape, bool))


@pytest.mark.both_backends
@pytest.mark.parametrize("arch", ["t5", "mt5"])
@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_t5_and_mt5_give_transformers_outputs(arch, weights, tmp_path):
    """T5 (ReLU, tied head, output scaled) and mT5 (gated tanh GELU, no output scaling in
    transformers 5, which our T5 always applies: the head kernel absorbs it)."""
    hidden, logits = _t5_errors(arch, _copy(arch, tmp_path, (weights,)))
    assert hidden < TOLERANCE and logits < TOLERANCE, (hidden, logits)


def test_t5_from_preset_is_the_version_of_the_directory():
    backbone = T5Backbone.from_preset(str(FIXTURES / "mt5"))
    assert backbone.transformer.version == "mt5.1.1" and not backbone.transformer.cross_position_bias
    hidden, logits = _t5_errors("mt5", FIXTURES / "mt5", model=backbone)
    assert hidden < TOLERANCE and logits < TOLERANCE


def test_a_t5_whose_head_transformers_would_not_scale_is_compensated(tmp_path):
    """Without the sqrt(d_model) factor on the head kernel the logits are d_model ** -0.5 too small."""
    directory = _copy("mt5", tmp_path)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    (directory / "config.json").write_text(json.dumps(dict(config, scale_decoder_outputs=True)), encoding="utf-8")
    _, logits = _t5_errors("mt5", directory)
    assert logits > 0.5


def test_sharded_safetensors_give_the_same_outputs(tmp_path):
    directory = _copy("bert", tmp_path, ())
    state = load_file(FIXTURES / "bert" / "model.safetensors")
    names, weight_map = sorted(state), {}
    for i, part in enumerate((names[::2], names[1::2])):
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({name: state[name] for name in part}, str(directory / shard))
        weight_map.update(dict.fromkeys(part, shard))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}), encoding="utf-8")
    _check_outputs("bert", directory)


@pytest.mark.both_backends
@pytest.mark.parametrize("arch", sorted(BACKBONES))
def test_from_preset_reads_a_hugging_face_directory(arch):
    backbone = BACKBONES[arch].from_preset(str(FIXTURES / arch))
    assert type(backbone) is BACKBONES[arch]
    _check_outputs(arch, FIXTURES / arch, model=backbone)


def test_from_preset_of_another_architecture_names_the_right_class():
    with pytest.raises(ConfigError, match=r"holds a 'gpt2' model .*load it with GPT2Backbone.from_preset"):
        BertBackbone.from_preset(str(FIXTURES / "gpt2"))


#: a tiny config with no model_type (bert4keras's bert_config.json layout)
TINY = dict(
    vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16, hidden_act="gelu"
)


def test_a_config_json_alone_names_the_model():
    model = build_transformer_model(str(FIXTURES / "gpt2" / "config.json"), model=None, return_keras_model=False)
    assert type(model).__name__ == "GPT2" and model.num_hidden_layers == 2
    # bert4keras's default stays: a config without a model_type builds BERT
    assert type(build_transformer_model(TINY, return_keras_model=False)).__name__ == "BERT"


def test_gpt2s_gelu_new_is_the_tanh_gelu(tmp_path):
    """With the exact GELU in place of gelu_new the outputs miss transformers' (so the parity
    test above would catch a wrong activation)."""
    directory = _copy("gpt2", tmp_path)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    (directory / "config.json").write_text(json.dumps(dict(config, activation_function="gelu")), encoding="utf-8")
    hidden, logits = _errors("gpt2", directory)
    assert hidden > TOLERANCE and logits > TOLERANCE


def test_the_backbone_of_a_hugging_face_gpt2_saves_and_reloads(tmp_path):
    backbone = GPT2Backbone.from_preset(str(FIXTURES / "gpt2"))
    backbone.save(tmp_path / "gpt2.keras")
    reloaded = keras.saving.load_model(tmp_path / "gpt2.keras")
    _check_outputs("gpt2", FIXTURES / "gpt2", model=reloaded)


# ------------------------------------------------------------------------------- bad input
def test_an_architecture_we_do_not_have_is_named_with_the_list(tmp_path):
    directory = _copy("bert", tmp_path)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    config.update(model_type="llama", architectures=["LlamaForCausalLM"])
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"model_type 'llama' \(architectures \['LlamaForCausalLM'\]\).*loads \["):
        build_transformer_model(checkpoint_path=directory, model=None)


def test_a_directory_without_weights_is_named(tmp_path):
    directory = _copy("bert", tmp_path, ())
    assert is_hf_directory(directory)
    with pytest.raises(CheckpointError, match=rf"{directory.name}'? has no weights file"):
        build_transformer_model(checkpoint_path=directory, model=None)


def test_a_weight_of_another_shape_is_named_with_both_shapes(tmp_path):
    directory = _copy("bert", tmp_path)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    (directory / "config.json").write_text(json.dumps(dict(config, intermediate_size=48)), encoding="utf-8")
    with pytest.raises(
        CheckpointError,
        match=r"'Transformer-0-FeedForward'.*has shape \(32, 48\) but checkpoint variable "
        r"'bert/encoder/layer_0/intermediate/dense/kernel' in '.*model.safetensors \(Hugging Face weights\)' "
        r"has shape \(32, 64\)",
    ):
        build_transformer_model(checkpoint_path=directory, model=None)


def test_hugging_face_names_map_to_the_tf1_names_the_models_read():
    checkpoint = hf_checkpoint(FIXTURES / "bert")
    assert checkpoint.sources["bert/encoder/layer_1/attention/self/query/kernel"] == (
        "bert.encoder.layer.1.attention.self.query.weight"
    )
    state = load_file(FIXTURES / "bert" / "model.safetensors")
    np.testing.assert_array_equal(
        checkpoint.get("bert/encoder/layer_1/attention/self/query/kernel"),
        state["bert.encoder.layer.1.attention.self.query.weight"].T,
    )
    gpt2 = hf_checkpoint(FIXTURES / "gpt2")
    fused = load_file(FIXTURES / "gpt2" / "model.safetensors")["transformer.h.0.attn.c_attn.weight"]
    np.testing.assert_array_equal(gpt2.get("gpt/transformer/layer_0/attention/self/value/kernel"), fused[:, 64:])


# ---------------------------------------------------------------------------------- writing
def _built(arch, directory):
    with_mlm = {} if arch == "gpt2" else {"with_mlm": "linear"}
    return build_transformer_model(checkpoint_path=directory, model=None, return_keras_model=False, **with_mlm)


@pytest.mark.parametrize("arch", ["bert", "roformer", "gpt2"])
def test_an_export_holds_the_tensors_transformers_wrote_and_reads_back(arch, tmp_path):
    written = hf_export(_built(arch, FIXTURES / arch), tmp_path / arch, FIXTURES / arch / "vocab.txt")
    ours, theirs = load_file(written), load_file(FIXTURES / arch / "model.safetensors")
    # the fixtures' pooler, NSP head and RoFormer's sinusoidal buffer are not in a model built without them
    assert set(theirs) - set(ours) <= {
        "bert.pooler.dense.weight",
        "bert.pooler.dense.bias",
        "cls.seq_relationship.weight",
        "cls.seq_relationship.bias",
        "roformer.encoder.embed_positions.weight",
    }
    for name in set(ours) & set(theirs):
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
    assert (tmp_path / arch / "vocab.txt").read_text(encoding="utf-8").startswith("[PAD]\n")
    _check_outputs(arch, tmp_path / arch)


def test_a_roberta_is_written_as_a_bert_with_positions_from_zero(tmp_path):
    hf_export(_built("roberta", FIXTURES / "roberta"), tmp_path / "roberta")
    config = json.loads((tmp_path / "roberta" / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "bert" and config["max_position_embeddings"] == 65  # 66 less the row before 0
    _check_outputs("roberta", tmp_path / "roberta")


def test_a_model_without_segments_is_written_with_one_zero_segment_row(tmp_path):
    hf_export(build_transformer_model(checkpoint_path=FIXTURES / "bert", model=None, segment_vocab_size=0), tmp_path)
    table = load_file(tmp_path / "model.safetensors")["bert.embeddings.token_type_embeddings.weight"]
    assert table.shape == (1, 32) and not table.any()


def test_an_architecture_without_a_hugging_face_writer_is_refused():
    albert = build_transformer_model(TINY, model="albert")
    with pytest.raises(ConfigError, match=r"a ALBERT cannot be written as Hugging Face files; these can: \['BERT'"):
        hf_export(albert, "unused")


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="torch and transformers are not installed",
)
@pytest.mark.parametrize("arch", ["bert", "roformer", "gpt2"])
def test_transformers_runs_an_export_to_the_same_outputs(arch, tmp_path):
    import torch
    import transformers

    hf_export(_built(arch, FIXTURES / arch), tmp_path)
    auto = transformers.AutoModelForCausalLM if arch == "gpt2" else transformers.AutoModelForMaskedLM
    model = auto.from_pretrained(tmp_path).eval()
    _, real, reference = _reference(arch)
    ids = torch.tensor(reference["token_ids"])
    inputs = {"input_ids": ids, "attention_mask": (ids != 0).long()}
    if arch != "gpt2":
        inputs["token_type_ids"] = torch.tensor(reference["segment_ids"])
    with torch.no_grad():
        logits = model(**inputs).logits.numpy()
    assert _relative_error(logits, reference["logits"], real) < TOLERANCE
