"""TF1 checkpoint round trips and error messages."""

import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

from gau_keras import build_transformer_model, checkpoints
from gau_keras.models.checkpointing import CheckpointWarning
from tests.model_utils import TINY_GAU, random_checkpoint, read_checkpoint, write_config

IDS = np.array([[2, 9, 14, 33, 3, 0]])
SEGMENTS = np.zeros_like(IDS)

GAU_NAMES = {"bert/embeddings/word_embeddings", "bert/embeddings/token_type_embeddings"} | {
    f"GAU_alpha/encoder/layer_{i}/gau/{n}"
    for i in range(2)
    for n in ("i_dense/kernel", "q_scaleoffset/gamma", "k_scaleoffset/gamma", "o_dense/kernel")
}


def test_round_trip_names_and_outputs(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    names = dict(checkpoints.list_variables(ckpt))
    assert set(names) == GAU_NAMES
    assert names["GAU_alpha/encoder/layer_0/gau/i_dense/kernel"] == [16, 2 * 24 + 8]
    original = build_transformer_model(config, ckpt, with_mlm=True, return_keras_model=False, model="gau_alpha")
    again = original.save_weights_as_checkpoint(str(tmp_path / "copy" / "model.ckpt"))
    for directory_or_prefix in (again, str(tmp_path / "copy")):
        reloaded = build_transformer_model(config, directory_or_prefix, with_mlm=True, model="gau_alpha")
        np.testing.assert_array_equal(
            reloaded.predict([IDS, SEGMENTS], verbose=0), original.model.predict([IDS, SEGMENTS], verbose=0)
        )


def test_roformer_v2_names(tmp_path):
    _, ckpt = random_checkpoint(str(tmp_path), "roformer_v2")
    names = {n for n, _ in checkpoints.list_variables(ckpt)}
    assert "bert/encoder/layer_1/attention/self/query/kernel" in names
    assert "bert/encoder/layer_0/intermediate/dense/kernel" in names
    assert not any("bias" in n or "LayerNorm" in n for n in names)


def test_not_a_checkpoint(tmp_path):
    config = write_config(str(tmp_path), TINY_GAU)
    with pytest.raises(checkpoints.CheckpointError, match="is not a TF checkpoint"):
        build_transformer_model(config, str(tmp_path / "nothing.ckpt"), model="gau_alpha")
    with pytest.raises(checkpoints.CheckpointError, match="without a unique TF checkpoint"):
        build_transformer_model(config, str(tmp_path), model="gau_alpha")


def _rewrite(ckpt, target, drop=(), replace=None):
    reader = tf.train.load_checkpoint(ckpt)
    values = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if n not in drop}
    values.update(replace or {})
    return checkpoints.save_checkpoint(target, values)


def test_missing_variable_names_layer_variable_and_file(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    name = "GAU_alpha/encoder/layer_1/gau/o_dense/kernel"
    broken = _rewrite(ckpt, str(tmp_path / "broken" / "bert_model.ckpt"), drop=[name])
    with pytest.raises(checkpoints.CheckpointError) as info:
        build_transformer_model(config, broken, model="gau_alpha")
    message = str(info.value)
    for part in ("Transformer-1-GatedAttentionUnit", name, "(24, 16)", broken):
        assert part in message
    model = build_transformer_model(config, broken, ignore_invalid_weights=True, model="gau_alpha")
    assert model.predict([IDS, SEGMENTS], verbose=0).shape == (1, 6, 16)


def test_shape_mismatch_names_both_shapes(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    name = "bert/embeddings/token_type_embeddings"
    broken = _rewrite(ckpt, str(tmp_path / "broken" / "bert_model.ckpt"), replace={name: np.zeros((3, 16), "float32")})
    with pytest.raises(checkpoints.CheckpointError) as info:
        build_transformer_model(config, broken, model="gau_alpha")
    message = str(info.value)
    for part in ("Embedding-Segment", name, "(2, 16)", "(3, 16)", broken):
        assert part in message


def test_state_file_points_at_prefix(tmp_path):
    prefix = checkpoints.save_checkpoint(str(tmp_path / "x.ckpt"), {"a/b": np.ones(3, "float32")})
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("x.ckpt")
    assert os.path.exists(prefix + ".index")
    np.testing.assert_array_equal(checkpoints.load_variable(str(tmp_path), "a/b"), np.ones(3))
    with pytest.raises(checkpoints.CheckpointError, match="no variable 'a/c'"):
        checkpoints.load_variable(prefix, "a/c")


def test_fewer_layers_than_the_checkpoint_warns_once_naming_the_unused(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path), num_hidden_layers=3)
    with pytest.warns(CheckpointWarning) as record:
        model = build_transformer_model(config, ckpt, num_hidden_layers=1, model="gau_alpha")
    assert len(record) == 1
    message = str(record[0].message)
    assert "8 variable(s)" in message and "GAU_alpha/encoder/layer_{1..2}/* (8 variables)" in message
    assert "unused_checkpoint_variables='error'" in message
    weights = read_checkpoint(ckpt)
    np.testing.assert_allclose(
        model.get_layer("Transformer-0-GatedAttentionUnit").o_dense.kernel.numpy(),
        weights["GAU_alpha/encoder/layer_0/gau/o_dense/kernel"],
        atol=1e-7,
    )
    with pytest.raises(checkpoints.CheckpointError, match=r"layer_\{1..2\}"):
        build_transformer_model(
            config, ckpt, num_hidden_layers=1, unused_checkpoint_variables="error", model="gau_alpha"
        )
    transformer = build_transformer_model(config, num_hidden_layers=1, return_keras_model=False, model="gau_alpha")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert transformer.load_weights_from_checkpoint(ckpt, unused_variables="ignore") == 6


def test_optimizer_state_is_not_an_unused_variable(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    kernel = "GAU_alpha/encoder/layer_0/gau/i_dense/kernel"
    extra = {
        name: np.zeros(3, "float32")
        for name in (
            "global_step",
            f"{kernel}/adam_m",
            f"{kernel}/adam_v",
            f"{kernel}/lamb_m",
            f"{kernel}/Adam_1",
            "beta1_power",
            "training/Adam/iterations",
        )
    }
    with_state = _rewrite(ckpt, str(tmp_path / "state" / "bert_model.ckpt"), replace=extra)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_transformer_model(config, with_state, model="gau_alpha")
    stray = _rewrite(
        ckpt, str(tmp_path / "stray" / "bert_model.ckpt"), replace={"bert/encoder/extra/kernel": np.zeros(3, "float32")}
    )
    with pytest.warns(CheckpointWarning, match="1 variable.*bert/encoder/extra/kernel"):
        build_transformer_model(config, stray, model="gau_alpha")


def test_dict_checkpoint_loads_like_a_file(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    from_file = build_transformer_model(config, ckpt, model="gau_alpha")
    from_dict = build_transformer_model(config, read_checkpoint(ckpt), model="gau_alpha")
    np.testing.assert_allclose(
        from_dict.predict([IDS, SEGMENTS], verbose=0), from_file.predict([IDS, SEGMENTS], verbose=0), atol=1e-6
    )


@pytest.mark.parametrize("model", ["nezha", "roformer"])
def test_a_bert_checkpoint_read_by_a_model_without_its_position_table_warns(tmp_path, model):
    config, ckpt = random_checkpoint(str(tmp_path), "bert", heads={"with_nsp": True, "with_mlm": True})
    with pytest.warns(
        CheckpointWarning,
        match=r"1 variable\(s\) that .* does not use: "
        r"bert/embeddings/position_embeddings;",
    ) as record:
        build_transformer_model(config, ckpt, model=model)
    assert len(record) == 1
    with warnings.catch_warnings():  # the heads a model's options leave out are not unused: BERT loads silently
        warnings.simplefilter("error")
        build_transformer_model(config, ckpt, model="bert")
        build_transformer_model(config, ckpt, model="bert", segment_vocab_size=0)


@pytest.mark.both_backends
def test_nan_or_inf_in_a_checkpoint_warns_naming_the_variables(tmp_path):
    config, ckpt = random_checkpoint(str(tmp_path))
    values = read_checkpoint(ckpt)
    kernel, table = "GAU_alpha/encoder/layer_1/gau/o_dense/kernel", "bert/embeddings/word_embeddings"
    values[kernel][0, :2] = np.nan
    values[table][3, 0] = -np.inf
    broken = checkpoints.save_checkpoint(
        str(tmp_path / "broken" / "bert_model.ckpt"), {n: v.astype("float32") for n, v in values.items()}
    )
    for source in (broken, values):
        with pytest.warns(CheckpointWarning, match="NaN or inf in 2 variable") as record:
            build_transformer_model(config, source, model="gau_alpha")
        assert len(record) == 1
        message = str(record[0].message)
        assert f"{kernel} (2 NaN, 0 inf)" in message and f"{table} (0 NaN, 1 inf)" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_transformer_model(config, ckpt, model="gau_alpha")
