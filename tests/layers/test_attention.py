"""GatedAttentionUnit, MultiHeadAttention and AttentionBias against numpy."""

import keras
import numpy as np
import pytest

from gau_keras import ops as gops
from gau_keras.layers import (
    AttentionBias,
    Embedding,
    GatedAttentionUnit,
    MultiHeadAttention,
    SinusoidalPositionEmbedding,
)
from gau_keras.layers import attention as attention_module
from tests import numpy_reference as ref
from tests.harness import PADDING, floats, run_layer_test
from tests.layer_utils import assert_keras_round_trip, gradients

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)

IDS = np.array([[5, 6, 7, 8, 0, 0], [0, 3, 4, 5, 6, 7]])  # right and left padding


def _np(v):
    return keras.ops.convert_to_numpy(v).astype(float)


def _dense(layer, x, act=lambda t: t):
    y = x @ _np(layer.kernel)
    if layer.use_bias:
        y = y + _np(layer.bias)
    return act(y)


def _scale_offset(layer, x):
    y = x * _np(layer.gamma)
    return y + _np(layer.beta) if layer.offset else y


def _randomize(layer, rng):
    for w in layer.weights:
        w.assign(rng.normal(size=w.shape) * 0.3)


@pytest.mark.parametrize("normalization", ["softmax", "softmax_plus", "squared_relu"])
@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("application", ["encoder", "lm"])
def test_gau_self_attention(rng, normalization, use_bias, application):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    keys = ref.key_mask(IDS)
    table = ref.sinusoidal(6, 4)
    layer = GatedAttentionUnit(5, 4, use_bias=use_bias, normalization=normalization, softmax_plus_min_len=1)
    inputs, kwargs = [x], {"p_bias": "rotary"}
    if application == "lm":
        inputs.append(keras.ops.convert_to_numpy(gops.causal_attention_bias(6)))
        kwargs["a_bias"] = True
    inputs.append(table[None].astype("float32"))
    layer(inputs, mask=[keys] + [None] * (len(inputs) - 1), **kwargs)
    _randomize(layer, rng)
    got = keras.ops.convert_to_numpy(layer(inputs, mask=[keys] + [None] * (len(inputs) - 1), **kwargs))

    z = _dense(layer.i_dense, x.astype(float), ref.swish)
    u, v, qk = z[..., :5], z[..., 5:10], z[..., 10:]
    q = ref.rotary(_scale_offset(layer.q_scaleoffset, qk), table)
    k = ref.rotary(_scale_offset(layer.k_scaleoffset, qk), table)
    a = np.einsum("bmd,bnd->bmn", q, k) / 2.0
    attention = ref.normalize(a, keys, ref.visibility(IDS, None, application), normalization, 1)
    expected = _dense(layer.o_dense, u * np.einsum("bmn,bnd->bmd", attention, v))
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_gau_cross_attention_masks_keys_with_v_mask(rng):
    q = rng.normal(size=(2, 3, 8)).astype("float32")
    kv = rng.normal(size=(2, 6, 8)).astype("float32")
    keys = ref.key_mask(IDS)
    layer = GatedAttentionUnit(5, 4, self_attention=False, normalization="softmax", use_bias=False)
    layer([q, kv, kv])
    _randomize(layer, rng)
    got = keras.ops.convert_to_numpy(layer([q, kv, kv], mask=[None, keys, keys]))
    uq = _dense(layer.i_dense, q.astype(float), ref.swish)
    u, qq = uq[..., :5], _scale_offset(layer.q_scaleoffset, uq[..., 5:])
    k = _scale_offset(layer.k_scaleoffset, _dense(layer.k_dense, kv.astype(float), ref.swish))
    v = _dense(layer.v_dense, kv.astype(float), ref.swish)
    a = np.einsum("bmd,bnd->bmn", qq, k) / 2.0
    attention = ref.softmax(np.where(keys[:, None, :], a, -np.inf))
    expected = _dense(layer.o_dense, u * np.einsum("bmn,bnd->bmd", attention, v))
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_gau_wrong_input_count_is_explained():
    layer = GatedAttentionUnit(4, 4)
    with pytest.raises(ValueError, match="expected 2 inputs"):
        layer([np.zeros((1, 2, 4), "float32")], p_bias="rotary")


def test_mha_rotary_matches_reference(rng):
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    table = ref.sinusoidal(6, 4)
    layer = MultiHeadAttention(2, 4, use_bias=False)
    inputs = [x, x, x, table[None].astype("float32")]
    keys = ref.key_mask(IDS)
    layer(inputs, p_bias="rotary")
    _randomize(layer, rng)
    got = keras.ops.convert_to_numpy(layer(inputs, mask=[keys, keys, keys, None], p_bias="rotary"))
    w = {
        "p/attention/self/query/kernel": _np(layer.q_dense.kernel),
        "p/attention/self/key/kernel": _np(layer.k_dense.kernel),
        "p/attention/self/value/kernel": _np(layer.v_dense.kernel),
        "p/attention/output/dense/kernel": _np(layer.o_dense.kernel),
    }
    expected = ref.mha(x.astype(float), w, "p/", keys, ref.visibility(IDS, None, "encoder"), 2, table)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_attention_bias_layer():
    segments = np.array([[0, 0, 1, 1]])
    unilm = keras.ops.convert_to_numpy(AttentionBias("unilm")(segments))
    np.testing.assert_array_equal(unilm, ref.visibility(segments, segments, "unilm"))
    lm = keras.ops.convert_to_numpy(AttentionBias("lm")(segments))
    assert lm.shape == (1, 4, 4)
    np.testing.assert_array_equal(lm[0], np.tril(np.ones((4, 4), bool)))
    with pytest.raises(ValueError, match="mode"):
        AttentionBias("causal")


@pytest.mark.parametrize("kind", ["gau", "mha"])
def test_attention_model_round_trip_and_mask(kind):
    ids = keras.Input((None,), dtype="int32")
    x = Embedding(20, 8, mask_zero=True)(ids)
    bias = AttentionBias("lm")(ids)
    position = SinusoidalPositionEmbedding(4, "zero")(x)
    if kind == "gau":
        y = GatedAttentionUnit(6, 4, attention_dropout=0.1, normalization="softmax_plus")(
            [x, bias, position], a_bias=True, p_bias="rotary"
        )
    else:
        y = MultiHeadAttention(2, 4, attention_dropout=0.1)([x, x, x, bias, position], a_bias=True, p_bias="rotary")
    assert y._keras_mask is not None
    assert_keras_round_trip(keras.Model(ids, y), IDS)


def test_mha_bert4keras_defaults_and_attention_scores(rng):
    x = rng.normal(size=(2, 5, 6)).astype("float32")
    layer = MultiHeadAttention(2, 4)
    assert tuple(layer([x, x, x]).shape) == (2, 5, 8)  # out_dim = heads * head_size
    scored = MultiHeadAttention(2, 4, out_dim=6, return_attention_scores=True, use_bias=False)
    out, scores = scored([x, x, x], mask=[None, None, np.array([[1, 1, 1, 0, 0]] * 2, bool)])
    assert tuple(out.shape) == (2, 5, 6) and tuple(scores.shape) == (2, 2, 5, 5)
    q = (x @ _np(scored.q_dense.kernel)).reshape(2, 5, 2, 4)
    k = (x @ _np(scored.k_dense.kernel)).reshape(2, 5, 2, 4)
    np.testing.assert_allclose(_np(scores), np.einsum("bjhd,bkhd->bhjk", q, k) / 2.0, rtol=1e-5, atol=1e-5)
    ids = keras.Input((None,), dtype="int32")
    h = Embedding(20, 6, mask_zero=True)(ids)
    o, a = MultiHeadAttention(2, 4, return_attention_scores=True)([h, h, h])
    assert o._keras_mask is not None and getattr(a, "_keras_mask", None) is None
    assert_keras_round_trip(keras.Model(ids, [o, a]), IDS)


def _attention_case(rng, application):
    """(layer, inputs, call arguments, masks, keep [B, L]) of a rotary MHA call with padding and an
    encoder / LM / UniLM visibility mask."""
    B, L, H, heads = 2, 8, 16, 4
    layer = MultiHeadAttention(heads=heads, head_size=H // heads, use_bias=False, attention_dropout=0.1)
    x = rng.normal(size=(B, L, H)).astype("float32")
    keep = np.ones((B, L), bool)
    keep[1, 5:] = False
    segments = np.array([[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0, 0, 0]])
    bias = {"encoder": None, "lm": gops.causal_attention_bias(L), "unilm": gops.unilm_attention_bias(segments)}[
        application
    ]
    sinusoidal = gops.sinusoidal_embeddings(np.arange(L)[None], H // heads)
    inputs = [x, x, x] + ([bias] if bias is not None else []) + [sinusoidal]
    arguments = {"a_bias": bias is not None, "p_bias": "rotary"}
    mask = [keras.ops.convert_to_tensor(keep)] * 3 + [None] * (len(inputs) - 3)
    return layer, inputs, arguments, mask, keep


def _outputs_and_gradients(layer, inputs, arguments, mask, keep):
    out = layer(inputs, mask=mask, **arguments)
    weights = [v.value for v in layer.trainable_variables]
    frozen = [v.value for v in layer.non_trainable_variables]
    outputs = lambda w: layer.stateless_call(list(w), frozen, inputs, mask=mask, **arguments)[0]  # noqa: E731
    loss = lambda *w: keras.ops.sum(outputs(w) * keras.ops.convert_to_tensor(keep[..., None], "float32"))  # noqa: E731
    return keras.ops.convert_to_numpy(out), [keras.ops.convert_to_numpy(g) for g in gradients(loss, weights)]


@pytest.mark.parametrize("application", ["encoder", "lm", "unilm"])
def test_mha_fused_attention_equals_the_spelled_out_one(rng, application, monkeypatch):
    """A softmax call without dropout runs jax.nn.dot_product_attention on a GPU (cuDNN); its
    masks and scale (here through JAX's XLA implementation, the same call) give the spelled-out
    attention's outputs and gradients (padding, rotary, LM/UniLM masks)."""
    if keras.backend.backend() != "jax":
        pytest.skip("the fused attention is JAX's (cuDNN on a GPU); TensorFlow spells it out")
    layer, inputs, arguments, mask, keep = _attention_case(rng, application)

    def run(fused):
        monkeypatch.setattr(MultiHeadAttention, "fusable", lambda self, bias, training: fused)
        if fused:
            plain = attention_module.MultiHeadAttention._fused_attention

            def through_xla(self, *args):
                calls.append(plain(self, *args, implementation="xla"))
                return calls[-1]

            monkeypatch.setattr(MultiHeadAttention, "_fused_attention", through_xla)
        return _outputs_and_gradients(layer, inputs, arguments, mask, keep)

    calls = []

    out_fused, grads_fused = run(True)
    assert calls and all(c is not None for c in calls)  # the fused call ran (JAX took its masks)
    monkeypatch.undo()
    out_plain, grads_plain = run(False)
    np.testing.assert_allclose(out_fused[keep], out_plain[keep], rtol=1e-5, atol=1e-6)
    for a, b in zip(grads_fused, grads_plain):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_call_cudnn_refuses_is_spelled_out(rng, monkeypatch):
    """Where cuDNN's checks refuse a call when it is traced (here: no GPU, no cuDNN), the layer
    spells the attention out instead of failing or taking Keras's XLA attention."""
    if keras.backend.backend() != "jax":
        pytest.skip("the fused attention is JAX's")
    layer, inputs, arguments, mask, keep = _attention_case(rng, "encoder")
    expected = keras.ops.convert_to_numpy(layer(inputs, mask=mask, **arguments))
    qw = keras.ops.ones((2, 8, 4, 4))
    assert layer._fused_attention(qw, qw, qw, keras.ops.convert_to_tensor(keep), None) is None
    monkeypatch.setattr(attention_module, "fused_attention_device", lambda: True)
    assert layer.fusable(None, training=False) is True
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(inputs, mask=mask, **arguments)), expected)


def test_fused_attention_only_on_a_gpu_and_only_for_calls_it_can_take(monkeypatch):
    """cuDNN's fused attention is tried only on JAX on a GPU (not after
    keras.config.disable_flash_attention()) and for calls it can take: softmax, no attention
    dropout in training, no additive bias, no scores returned."""
    on_gpu = False
    if keras.backend.backend() == "jax":
        import jax

        on_gpu = jax.default_backend() == "gpu"
    assert attention_module.fused_attention_device() is on_gpu
    layer = MultiHeadAttention(heads=2, head_size=4, use_bias=False, attention_dropout=0.1)
    assert layer.fusable(None, training=False) is on_gpu
    if keras.backend.backend() == "jax":
        import jax

        monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
        assert attention_module.fused_attention_device() is True
        with monkeypatch.context() as patch:  # keras.config.disable_flash_attention(), undone after
            patch.setattr(keras.config, "is_flash_attention_enabled", lambda: False)
            assert attention_module.fused_attention_device() is False
        monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
        assert attention_module.fused_attention_device() is False
    monkeypatch.setattr(attention_module, "fused_attention_device", lambda: True)
    assert layer.fusable(None, training=False) is True
    assert layer.fusable(None, training=True) is False  # attention dropout in training: spelled out
    assert layer.fusable(keras.ops.zeros((1, 4, 4)), training=False) is False  # an additive bias
    scored = MultiHeadAttention(heads=2, head_size=4, return_attention_scores=True)
    assert scored.fusable(None, training=False) is False


def test_cudnn_runs_a_padded_bfloat16_call_on_a_gpu(rng):
    """On a GPU (skipped elsewhere): a bfloat16 call with a padding mask compiles to cuDNN's fused
    attention (the mask broadcast to [B, 1, Lq, Lk]; cuDNN refuses a [B, 1, 1, Lk] one)."""
    if keras.backend.backend() != "jax":
        pytest.skip("the fused attention is JAX's")
    import jax

    if jax.default_backend() != "gpu":
        pytest.skip("needs a GPU")
    layer = MultiHeadAttention(heads=2, head_size=64, use_bias=False, dtype="mixed_bfloat16")
    x = rng.normal(size=(2, 128, 128)).astype("float32")
    keep = np.ones((2, 128), bool)
    keep[1, 100:] = False
    layer([x, x, x])

    def call(x, keep):
        return layer([x, x, x], mask=[None, None, keep])

    text = jax.jit(call).lower(x, keep).compile().as_text()
    assert "__cudnn$fmha" in text


def test_mha_float16_runs_on_every_backend_and_device(rng):
    """mixed_float16 attention, spelled out on this CPU (Keras's XLA attention on JAX asked XLA's
    CPU dot for float16 products with float32 results, which it refuses): the outputs match
    float32's within float16's precision."""
    B, L, H = 2, 6, 8
    x = rng.normal(size=(B, L, H)).astype("float32")
    exact = MultiHeadAttention(heads=2, head_size=4, use_bias=False)
    half = MultiHeadAttention(heads=2, head_size=4, use_bias=False, dtype="mixed_float16")
    expected = keras.ops.convert_to_numpy(exact([x, x, x]))
    half([x, x, x])
    half.set_weights(exact.get_weights())
    got = keras.ops.convert_to_numpy(keras.ops.cast(half([x, x, x]), "float32"))
    np.testing.assert_allclose(got, expected, atol=1e-2)


def _gau_reference(layer, x, kv, bias, key_mask):
    """GAU's output with softmax_plus spelled out on the logits (what the layer computed
    before the factor was folded into q), from the layer's own weights."""
    from keras import ops

    u, q = ops.split(layer.i_dense(x), [layer.units], axis=-1)
    k, v = layer.k_dense(kv), layer.v_dense(kv)
    q, k = layer.q_scaleoffset(q), layer.k_scaleoffset(k)
    a = ops.einsum("bmd,bnd->bmn", q, k) / layer.key_size**0.5
    attention = gops.attention_normalize(a, key_mask, "softmax_plus", bias, layer.softmax_plus_min_len)
    return keras.ops.convert_to_numpy(layer.o_dense(u * ops.einsum("bmn,bnd->bmd", attention, v)))


@pytest.mark.parametrize("bias_kind", ["none", "float"])
def test_gau_softmax_plus_cross_attention_equals_the_logit_form(rng, bias_kind):
    """Lq != Lk without a mask (n = Lk), and an additive float bias (scaled with the logits)."""
    B, Lq, Lk, H = 2, 3, 20, 8
    layer = GatedAttentionUnit(
        units=8, key_size=4, self_attention=False, normalization="softmax_plus", softmax_plus_min_len=1
    )
    x, kv = rng.normal(size=(B, Lq, H)).astype("float32"), rng.normal(size=(B, Lk, H)).astype("float32")
    bias = None if bias_kind == "none" else rng.normal(size=(1, Lq, Lk)).astype("float32")
    inputs = [x, kv, kv] + ([bias] if bias is not None else [])
    got = keras.ops.convert_to_numpy(layer(inputs, a_bias=bias is not None))
    np.testing.assert_allclose(got, _gau_reference(layer, x, kv, bias, None), rtol=1e-5, atol=1e-6)


def test_gated_attention_unit_passes_the_layer_harness():
    run_layer_test(GatedAttentionUnit, {"units": 12, "key_size": 4}, floats(2, 5, 8), (2, 5, 8), input_mask=PADDING)


def test_multi_head_attention_passes_the_layer_harness():
    inputs = [floats(2, 5, 8, seed=i) for i in range(3)]
    run_layer_test(
        MultiHeadAttention,
        {"heads": 2, "head_size": 4},
        inputs,
        (2, 5, 8),
        input_mask=[PADDING, PADDING, PADDING],
        expected_output_mask=PADDING,
    )


def test_attention_bias_passes_the_layer_harness():
    segments = np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]], "int32")
    run_layer_test(AttentionBias, {"mode": "unilm"}, segments, (2, 5, 5), input_mask=PADDING, expected_output_mask=None)


def test_mha_t5_relative_adds_the_bias_per_head_to_unscaled_scores():
    """``p_bias='t5_relative'``: a bias [Lq, Lk, heads] added to each head's q·k (T5: no scale)."""
    rng = np.random.default_rng(3)
    q, kv = rng.normal(size=(2, 4, 8)).astype("float32"), rng.normal(size=(2, 5, 8)).astype("float32")
    bias = rng.normal(size=(4, 5, 2)).astype("float32")
    layer = MultiHeadAttention(2, 3, out_dim=8, use_bias=False, attention_scale=False)
    got = _np(layer([q, kv, kv, bias], p_bias="t5_relative"))
    heads = lambda x, d: x.reshape(x.shape[0], x.shape[1], 2, d).transpose(0, 2, 1, 3)  # noqa: E731
    qw, kw, vw = (
        heads(x @ _np(d.kernel), 3) for x, d in ((q, layer.q_dense), (kv, layer.k_dense), (kv, layer.v_dense))
    )
    scores = qw @ kw.transpose(0, 1, 3, 2) + bias.transpose(2, 0, 1)[None]
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    o = (weights @ vw).transpose(0, 2, 1, 3).reshape(2, 4, 6) @ _np(layer.o_dense.kernel)
    np.testing.assert_allclose(got, o, atol=1e-5)
