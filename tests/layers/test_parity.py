"""bert4keras 0.11.5's layers against ours on the same weights and inputs:
CRF / MEMM losses and accuracies, GlobalPointer / EfficientGlobalPointer
(weights copied both ways), conditional LayerNormalization, PositionEmbedding,
the relative position embeddings, Concatenate1D and the masked max pooling.
One reference process for the whole module."""

import keras
import numpy as np
import pytest

from gau_keras import layers as L
from tests.reference.harness import run_bert4keras_code

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

LABELS, LENGTHS = 5, [6, 4, 2]
GP_VARIANTS = [dict(), dict(RoPE=False), dict(tril_mask=False, use_bias=False)]

SNIPPET = r"""
from bert4keras import layers as B

mask = tf.constant(inputs["mask"].astype(bool))
logits = tf.constant(np.where(inputs["mask"][..., None], inputs["logits"], 0).astype("float32"))
labels, onehot = inputs["labels"], np.eye(5, dtype="float32")[inputs["labels"]]

for lr in (1, 3):
    crf = B.ConditionalRandomField(lr_multiplier=lr)
    y = crf(logits, mask=mask)
    K.set_value(crf._trans, inputs["trans"])
    outputs[f"crf{lr}_out"] = y
    outputs[f"crf{lr}_sparse_loss"] = crf.sparse_loss(labels, y)
    outputs[f"crf{lr}_dense_loss"] = crf.dense_loss(onehot, y)
    outputs[f"crf{lr}_sparse_acc"] = crf.sparse_accuracy(labels, y)
    outputs[f"crf{lr}_dense_acc"] = crf.dense_accuracy(onehot, y)

for name, hidden in (("memm", None), ("memm_lowrank", 3)):
    memm = B.MaximumEntropyMarkovModel(lr_multiplier=2, hidden_dim=hidden)
    y = memm(logits, mask=mask)
    if hidden is None:
        K.set_value(memm._trans, inputs["trans"])
    else:
        K.set_value(memm._l_trans, inputs["l_trans"])
        K.set_value(memm._r_trans, inputs["r_trans"])
    outputs[name + "_sparse_loss"] = memm.sparse_loss(labels, y)
    outputs[name + "_dense_loss"] = memm.dense_loss(onehot, y)
    outputs[name + "_sparse_acc"] = memm.sparse_accuracy(labels, y)
    outputs[name + "_dense_acc"] = memm.dense_accuracy(onehot, y)

x, x_mask = tf.constant(inputs["x"]), tf.constant(inputs["x_mask"].astype(bool))
for i, options in enumerate([dict(), dict(RoPE=False), dict(tril_mask=False, use_bias=False)]):
    gp = B.GlobalPointer(3, 4, **options)
    gp(x, mask=x_mask)  # builds with bert4keras's own initialisation: we copy from it
    outputs[f"gp{i}_weights"] = np.concatenate([w.ravel() for w in gp.get_weights()])
    outputs[f"gp{i}_shapes"] = np.array([d for w in gp.get_weights() for d in w.shape + (0,)])
    outputs[f"gp{i}"] = gp(x, mask=x_mask)
    egp = B.EfficientGlobalPointer(3, 4, **options)
    egp(x, mask=x_mask)
    outputs[f"egp{i}_shapes"] = np.array([d for w in egp.get_weights() for d in w.shape + (0,)])
    egp.set_weights([inputs[f"egp{i}_w{j}"] for j in range(len(egp.get_weights()))])  # from ours
    outputs[f"egp{i}"] = egp(x, mask=x_mask)

cond2 = tf.constant(inputs["cond2"])
ln = B.LayerNormalization(conditional=True)
ln([x, cond2])
for attr in ("gamma", "beta"):
    K.set_value(getattr(ln, attr), inputs["ln_" + attr])
for attr in ("gamma_dense", "beta_dense"):
    K.set_value(getattr(ln, attr).kernel, inputs["ln_" + attr])
outputs["cln"] = ln([x, cond2])
ln = B.LayerNormalization(conditional=True, hidden_units=3, hidden_activation="tanh", zero_mean=False, offset=False)
ln([x, cond2])
K.set_value(ln.gamma, inputs["ln_gamma"])
K.set_value(ln.hidden_dense.kernel, inputs["ln_hidden"])
K.set_value(ln.gamma_dense.kernel, inputs["ln_gamma_dense_h"])
outputs["cln_hidden"] = ln([x, cond2])

for mode in ("add", "mul", "zero", "concat"):
    pe = B.PositionEmbedding(9, 6, merge_mode=mode)
    pe(x)
    K.set_value(pe.embeddings, inputs["pos_table"])
    outputs["pe_" + mode] = pe(x)
pe = B.PositionEmbedding(9, 6, hierarchical=True, custom_position_ids=True)
pe([x, tf.constant(inputs["pos_ids"])])
K.set_value(pe.embeddings, inputs["pos_table"])
outputs["pe_hier"] = pe([x, tf.constant(inputs["pos_ids"])])
pe = B.PositionEmbedding(9, 6, merge_mode="concat", custom_position_ids=True)
pe([x, tf.constant(inputs["pos_ids"] % 9)])
K.set_value(pe.embeddings, inputs["pos_table"])
outputs["pe_custom"] = pe([x, tf.constant(inputs["pos_ids"] % 9)])

q, v = tf.zeros((1, 5, 2)), tf.zeros((1, 11, 2))
rel = B.RelativePositionEmbedding(7, 3)  # its compute_mask fails without masks: call() directly
rel.build(None)
K.set_value(rel.embeddings, inputs["rel_table"][:7])
outputs["rel"] = rel.call([q, v])
for bidirectional in (True, False):
    t5 = B.RelativePositionEmbeddingT5(8, 3, max_distance=9, bidirectional=bidirectional)
    t5.build(None)
    K.set_value(t5.embeddings, inputs["rel_table"])
    outputs[f"t5_{bidirectional}_ids"] = t5.compute_position_ids([q, v])
    outputs[f"t5_{bidirectional}"] = t5.call([q, v])

a, b = x[:, :3], x[:, 3:]
cat = B.Concatenate1D()
outputs["cat"] = cat([a, b])
outputs["cat_mask"] = cat.compute_mask([a, b], [None, x_mask[:, 3:]])
outputs["maxpool"] = B.GlobalMaxPooling1D()(x, mask=x_mask)

import inspect
for name, cls in B.custom_objects.items():
    parameters = [p for p in inspect.signature(cls.__init__).parameters.values()
                  if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD]
    outputs["signature_" + name] = np.array([f"{p.name}={p.default!r}" for p in parameters] or [""])
"""


def _inputs():
    rng = np.random.default_rng(7)
    mask = np.arange(6)[None] < np.array(LENGTHS)[:, None]
    x_mask = np.arange(7)[None] < np.array([7, 4])[:, None]
    data = dict(
        logits=rng.normal(size=(3, 6, LABELS)).astype("float32"),
        mask=mask,
        labels=rng.integers(0, LABELS, size=(3, 6)),
        trans=rng.normal(size=(LABELS, LABELS)).astype("float32"),
        l_trans=rng.normal(size=(LABELS, 3)).astype("float32"),
        r_trans=rng.normal(size=(LABELS, 3)).astype("float32"),
        x=rng.normal(size=(2, 7, 6)).astype("float32"),
        x_mask=x_mask,
        cond2=rng.normal(size=(2, 4)).astype("float32"),
        ln_gamma=rng.normal(size=6).astype("float32"),
        ln_beta=rng.normal(size=6).astype("float32"),
        ln_gamma_dense=rng.normal(size=(4, 6)).astype("float32"),
        ln_beta_dense=rng.normal(size=(4, 6)).astype("float32"),
        ln_hidden=rng.normal(size=(4, 3)).astype("float32"),
        ln_gamma_dense_h=rng.normal(size=(3, 6)).astype("float32"),
        pos_table=rng.normal(size=(9, 6)).astype("float32"),
        pos_ids=rng.integers(0, 81, size=(2, 7)),
        rel_table=rng.normal(size=(8, 3)).astype("float32"),
    )
    for i, options in enumerate(GP_VARIANTS):
        egp = L.EfficientGlobalPointer(3, 4, **options)
        egp.build((None, None, 6))
        for j, w in enumerate(egp.get_weights()):
            data[f"egp{i}_w{j}"] = rng.normal(size=w.shape).astype("float32")
    return data


@pytest.fixture(scope="module")
def case():
    data = _inputs()
    return data, run_bert4keras_code(SNIPPET, data)


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _masked_logits(data):
    return np.where(data["mask"][..., None], data["logits"], 0).astype("float32")


@pytest.mark.parametrize("lr", [1, 3])
def test_crf_losses_and_accuracies(case, lr):
    data, ref = case
    crf = L.ConditionalRandomField(lr_multiplier=lr)
    y = crf(_masked_logits(data), mask=data["mask"])
    crf._trans.assign(data["trans"])
    np.testing.assert_array_equal(_np(y), ref[f"crf{lr}_out"])
    np.testing.assert_allclose(_np(crf.trans), data["trans"] * lr, rtol=1e-6)
    onehot = np.eye(LABELS, dtype="float32")[data["labels"]]
    for name, got in [
        ("sparse_loss", crf.sparse_loss(data["labels"], y)),
        ("dense_loss", crf.dense_loss(onehot, y)),
        ("sparse_acc", crf.sparse_accuracy(data["labels"], y)),
        ("dense_acc", crf.dense_accuracy(onehot, y)),
    ]:
        np.testing.assert_allclose(_np(got), ref[f"crf{lr}_{name}"], rtol=1e-5, atol=1e-5, err_msg=name)
    assert np.all(np.isfinite(ref[f"crf{lr}_sparse_loss"])) and ref[f"crf{lr}_sparse_loss"].shape == (3,)


@pytest.mark.parametrize("hidden", [None, 3])
def test_memm_losses_and_accuracies(case, hidden):
    data, ref = case
    memm = L.MaximumEntropyMarkovModel(lr_multiplier=2, hidden_dim=hidden)
    y = memm(_masked_logits(data), mask=data["mask"])
    if hidden is None:
        memm._trans.assign(data["trans"])
    else:
        memm._l_trans.assign(data["l_trans"])
        memm._r_trans.assign(data["r_trans"])
    name = "memm" if hidden is None else "memm_lowrank"
    onehot = np.eye(LABELS, dtype="float32")[data["labels"]]
    for key, got in [
        ("sparse_loss", memm.sparse_loss(data["labels"], y)),
        ("dense_loss", memm.dense_loss(onehot, y)),
        ("sparse_acc", memm.sparse_accuracy(data["labels"], y)),
        ("dense_acc", memm.dense_accuracy(onehot, y)),
    ]:
        np.testing.assert_allclose(_np(got), ref[f"{name}_{key}"], rtol=1e-5, atol=1e-6, err_msg=key)


def _assert_same_valid_spans(got, expected):
    valid = np.isfinite(expected)
    assert valid.any() and (~valid).any()
    np.testing.assert_allclose(got[valid], expected[valid], rtol=1e-5, atol=1e-5)
    assert np.all(got[~valid] <= -1e11)


@pytest.mark.parametrize("variant", range(len(GP_VARIANTS)))
def test_global_pointers_with_bert4keras_weights(case, variant):
    data, ref = case
    x, mask = data["x"], data["x_mask"]
    gp = L.GlobalPointer(3, 4, **GP_VARIANTS[variant])
    gp(x, mask=mask)
    shapes = [w.shape for w in gp.get_weights()]
    np.testing.assert_array_equal([d for s in shapes for d in s + (0,)], ref[f"gp{variant}_shapes"])
    flat, weights = ref[f"gp{variant}_weights"], []
    for shape in shapes:  # bert4keras's initial weights into ours
        weights.append(flat[: int(np.prod(shape))].reshape(shape))
        flat = flat[int(np.prod(shape)) :]
    gp.set_weights(weights)
    _assert_same_valid_spans(_np(gp(x, mask=mask)), ref[f"gp{variant}"])

    egp = L.EfficientGlobalPointer(3, 4, **GP_VARIANTS[variant])
    egp(x, mask=mask)
    np.testing.assert_array_equal([d for w in egp.get_weights() for d in w.shape + (0,)], ref[f"egp{variant}_shapes"])
    egp.set_weights([data[f"egp{variant}_w{j}"] for j in range(len(egp.get_weights()))])  # ours into bert4keras's
    _assert_same_valid_spans(_np(egp(x, mask=mask)), ref[f"egp{variant}"])


def test_conditional_layer_normalization(case):
    data, ref = case
    x = data["x"]
    ln = L.LayerNormalization(conditional=True)
    ln([x, data["cond2"]])
    ln.gamma.assign(data["ln_gamma"])
    ln.beta.assign(data["ln_beta"])
    ln.gamma_dense.kernel.assign(data["ln_gamma_dense"])
    ln.beta_dense.kernel.assign(data["ln_beta_dense"])
    np.testing.assert_allclose(_np(ln([x, data["cond2"]])), ref["cln"], rtol=1e-5, atol=1e-5)
    ln = L.LayerNormalization(conditional=True, hidden_units=3, hidden_activation="tanh", zero_mean=False, offset=False)
    ln([x, data["cond2"]])
    assert not hasattr(ln, "beta") and not hasattr(ln, "beta_dense")
    ln.gamma.assign(data["ln_gamma"])
    ln.hidden_dense.kernel.assign(data["ln_hidden"])
    ln.gamma_dense.kernel.assign(data["ln_gamma_dense_h"])
    np.testing.assert_allclose(_np(ln([x, data["cond2"]])), ref["cln_hidden"], rtol=1e-5, atol=1e-5)


def test_position_embeddings(case):
    data, ref = case
    x, table = data["x"], data["pos_table"]

    def run(inputs, **options):
        layer = L.PositionEmbedding(9, 6, **options)
        layer(inputs)
        layer.embeddings.assign(table)
        return _np(layer(inputs))

    for mode in ("add", "mul", "zero", "concat"):
        np.testing.assert_allclose(run(x, merge_mode=mode), ref["pe_" + mode], rtol=1e-6, atol=1e-6, err_msg=mode)
    ids = data["pos_ids"]
    assert ids.max() >= 9  # the hierarchical table reaches beyond input_dim
    np.testing.assert_allclose(
        run([x, ids], hierarchical=True, custom_position_ids=True), ref["pe_hier"], rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        run([x, ids % 9], merge_mode="concat", custom_position_ids=True), ref["pe_custom"], rtol=1e-6
    )


def test_relative_position_embeddings(case):
    data, ref = case
    q, v = np.zeros((1, 5, 2), "float32"), np.zeros((1, 11, 2), "float32")
    rel = L.RelativePositionEmbedding(7, 3)
    rel([q, v])
    rel.embeddings.assign(data["rel_table"][:7])
    np.testing.assert_allclose(_np(rel([q, v])), ref["rel"], rtol=1e-6)
    assert ref["rel"].shape == (5, 11, 3)
    for bidirectional in (True, False):
        t5 = L.RelativePositionEmbeddingT5(8, 3, max_distance=9, bidirectional=bidirectional)
        t5([q, v])
        t5.embeddings.assign(data["rel_table"])
        np.testing.assert_array_equal(_np(t5.compute_position_ids([q, v])), ref[f"t5_{bidirectional}_ids"])
        np.testing.assert_allclose(_np(t5([q, v])), ref[f"t5_{bidirectional}"], rtol=1e-6)


def test_concatenate1d_and_max_pooling(case):
    data, ref = case
    x, mask = data["x"], data["x_mask"]
    cat = L.Concatenate1D()
    np.testing.assert_array_equal(_np(cat([x[:, :3], x[:, 3:]])), ref["cat"])
    np.testing.assert_array_equal(_np(cat.compute_mask([x[:, :3], x[:, 3:]], [None, mask[:, 3:]])), ref["cat_mask"])
    np.testing.assert_allclose(_np(L.GlobalMaxPooling1D()(x, mask=mask)), ref["maxpool"], rtol=1e-6)


#: bert4keras layers we do not ship (multi-device batch splitting, done by tf.distribute in Keras 3),
#: and Embedding, whose constructor is Keras's own (Keras 3's differs from Keras 2's past mask_zero)
NOT_COMPARED = {"BatchSplit", "BatchConcat", "Embedding"}


def test_constructors_take_bert4keras_arguments_in_its_order(case):
    import inspect

    _, ref = case
    names = {key[len("signature_") :] for key in ref if key.startswith("signature_")}
    assert {"Loss", "GlobalPointer", "ConditionalRandomField"} <= names
    mismatches = []
    for name in sorted(names - NOT_COMPARED):
        expected = [p for p in ref["signature_" + name].tolist() if p]
        parameters = [
            p
            for p in inspect.signature(getattr(L, name).__init__).parameters.values()
            if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD
        ]
        got = [f"{p.name}={p.default!r}" for p in parameters]
        if got[: len(expected)] != expected:
            mismatches.append((name, expected, got))
    assert not mismatches


def test_bert4keras_layer_names_and_keras_layers_are_importable(case):
    _, ref = case
    names = {key[len("signature_") :] for key in ref if key.startswith("signature_")}
    assert names - {"BatchSplit", "BatchConcat"} == set(L.custom_objects)
    assert all(L.custom_objects[name] is getattr(L, name) for name in L.custom_objects)
    star = {}
    exec("from gau_keras.layers import *", star)
    assert star["Dense"] is keras.layers.Dense and star["GlobalPointer"] is L.GlobalPointer
    assert star["LayerNormalization"] is L.LayerNormalization  # ours shadow Keras's, as in bert4keras
    with pytest.raises(AttributeError, match="no attribute"):
        L.NotALayer  # noqa: B018
