"""gau_keras.ops against the numpy reference."""

import numpy as np
import pytest
from keras import ops

from gau_keras import ops as gops
from tests import numpy_reference as ref
from tests.layer_utils import gradients


def test_key_mask_keeps_position_zero():
    ids = np.array([[0, 5, 0, 7], [3, 4, 0, 0]])
    mask = ops.convert_to_numpy(gops.key_mask_from_token_ids(ids))
    np.testing.assert_array_equal(mask, [[True, True, False, True], [True, True, False, False]])


@pytest.mark.parametrize("method", ["softmax", "softmax_plus", "squared_relu"])
@pytest.mark.parametrize("min_len", [1, 16])
def test_attention_normalize_matches_reference(rng, method, min_len):
    ids = np.array([[4, 5, 6, 0, 0, 0], [4, 5, 6, 7, 8, 9]])
    a = rng.normal(size=(2, 6, 6)) * 3
    keys = ref.key_mask(ids)
    visible = ref.visibility(ids, None, "encoder")
    expected = ref.normalize(a, keys, visible, method, min_len)
    got = gops.attention_normalize(a.astype("float32"), keys, method, None, min_len)
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, atol=2e-6)


def test_softmax_plus_scale_is_log_n_over_log_512(rng):
    a = rng.normal(size=(1, 3, 40)).astype("float32")
    got = ops.convert_to_numpy(gops.attention_normalize(a, None, "softmax_plus", min_len=16))
    np.testing.assert_allclose(got, ref.softmax(a * np.log(40) / np.log(512)), atol=1e-6)
    short = rng.normal(size=(1, 3, 4)).astype("float32")
    for floor, n in [(16, 16), (1, 4)]:
        got = ops.convert_to_numpy(gops.attention_normalize(short, None, "softmax_plus", min_len=floor))
        np.testing.assert_allclose(got, ref.softmax(short * np.log(n) / np.log(512)), atol=1e-6)


@pytest.mark.parametrize("application", ["lm", "unilm"])
def test_attention_bias_matches_visibility(rng, application):
    ids = np.array([[3, 4, 5, 6, 7]])
    segments = np.array([[0, 0, 1, 1, 1]])
    a = rng.normal(size=(1, 5, 5)).astype("float32")
    if application == "lm":
        bias = gops.causal_attention_bias(5)
    else:
        bias = gops.unilm_attention_bias(segments)
    got = gops.attention_normalize(a, ref.key_mask(ids), "softmax", bias)
    expected = ref.normalize(a, ref.key_mask(ids), ref.visibility(ids, segments, application), "softmax", 1)
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, atol=1e-6)


def test_unknown_normalization_is_named():
    with pytest.raises(ValueError, match="softmax_plux"):
        gops.attention_normalize(np.zeros((1, 2, 2), "float32"), method="softmax_plux")


def test_sinusoidal_interleaved_layout():
    got = ops.convert_to_numpy(gops.sinusoidal_embeddings(np.arange(7.0)[None], 8))[0]
    np.testing.assert_allclose(got, ref.sinusoidal(7, 8), atol=2e-6)


def test_sinusoidal_beyond_max_position():
    got = ops.convert_to_numpy(gops.sinusoidal_embeddings(np.array([[1500.0]]), 4))[0]
    np.testing.assert_allclose(got, ref.sinusoidal(1501, 4)[-1:], atol=2e-4)


@pytest.mark.parametrize("heads", [None, 3])
def test_apply_rotary(rng, heads):
    table = ref.sinusoidal(5, 8)
    shape = (2, 5, 8) if heads is None else (2, 5, heads, 8)
    x = rng.normal(size=shape)
    expected = ref.rotary(x, table if heads is None else table[:, None, :])
    got = gops.apply_rotary(table[None].astype("float32"), x.astype("float32"))
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, atol=2e-6)


def test_rotary_is_relative(rng):
    """q_m . k_n after RoPE depends only on m - n."""
    table = gops.sinusoidal_embeddings(np.arange(12.0)[None], 8)
    q, k = rng.normal(size=(1, 1, 8)), rng.normal(size=(1, 1, 8))
    q = np.repeat(q, 12, axis=1).astype("float32")
    k = np.repeat(k, 12, axis=1).astype("float32")
    qr = ops.convert_to_numpy(gops.apply_rotary(table, q))[0]
    kr = ops.convert_to_numpy(gops.apply_rotary(table, k))[0]
    np.testing.assert_allclose(qr[5] @ kr[2], qr[9] @ kr[6], rtol=1e-5)


# ------------------------------------------------- the hand-written gradients
def _plain_softmax(a, allowed):
    return ops.softmax(a if allowed is None else gops.masked_fill(a, allowed), axis=-1)


def _plain_rms(x, epsilon):
    x32 = ops.cast(x, "float32")
    return x32 / ops.sqrt(ops.mean(ops.square(x32), axis=-1, keepdims=True) + epsilon)


@pytest.mark.both_backends
def test_masked_softmax_gradient_equals_autodiff(rng):
    """p (g - Σ g p) from the saved output: the gradient of softmax(where(mask, a, NEG_INF)),
    masked logits 0, a row with every key masked finite."""
    a = (rng.normal(size=(2, 4, 5)) * 3).astype("float32")
    allowed = rng.random((2, 4, 5)) > 0.3
    allowed[0, 1] = False  # a row with nothing visible
    weight = rng.normal(size=(2, 4, 5)).astype("float32")
    ours = gradients(lambda x: ops.sum(gops.masked_softmax(x, allowed) * weight), [a])[0]
    plain = gradients(lambda x: ops.sum(_plain_softmax(x, allowed) * weight), [a])[0]
    ours = ops.convert_to_numpy(ours)
    np.testing.assert_allclose(ours, ops.convert_to_numpy(plain), atol=1e-6)
    assert np.isfinite(ours).all() and not ours[~allowed].any()
    value = ops.convert_to_numpy(gops.masked_softmax(a, allowed, "bfloat16"))
    assert str(value.dtype) == "bfloat16"


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "dtype, scale, atol", [("float32", 3.0, 1e-6), ("float16", 1000.0, 2e-3), ("bfloat16", 3.0, 2e-2)]
)
def test_rms_normalize_value_and_gradient(rng, dtype, scale, atol):
    """Against float32 autodiff of x / sqrt(mean(x²) + eps): float16 inputs whose squares
    overflow float16 (|x| 1000) stay finite; bfloat16 within its own precision."""
    x = (rng.normal(size=(2, 3, 8)) * scale).astype("float32")
    weight = rng.normal(size=(2, 3, 8)).astype("float32")
    expected = ops.convert_to_numpy(_plain_rms(x, 1e-7))
    got = ops.convert_to_numpy(ops.cast(gops.rms_normalize(ops.cast(x, dtype), 1e-7), "float32"))
    np.testing.assert_allclose(got, expected, atol=atol * 4)
    ours = gradients(
        lambda v: ops.sum(ops.cast(gops.rms_normalize(ops.cast(v, dtype), 1e-7), "float32") * weight), [x]
    )[0]
    plain = gradients(lambda v: ops.sum(_plain_rms(v, 1e-7) * weight), [x])[0]
    ours, plain = ops.convert_to_numpy(ours), ops.convert_to_numpy(plain)
    assert np.isfinite(ours).all()
    np.testing.assert_allclose(ours * scale, plain * scale, atol=atol * 4)


@pytest.mark.both_backends
def test_rms_normalize_rounds_once_in_bfloat16(rng):
    """bfloat16: y is the float32 x / rms rounded once, not x times r rounded to bfloat16 (an
    error of up to 2^-9 on a whole row's scale, which moved the bundled GAU-alpha's bf16 MLM
    probabilities ~30% further from float32's; issue 51)."""
    x = ops.cast((rng.normal(size=(64, 256)) * 3).astype("float32"), "bfloat16")
    x32 = ops.convert_to_numpy(ops.cast(x, "float32"))
    exact = x32 / np.sqrt(np.mean(np.square(x32), axis=-1, keepdims=True) + 1e-7)
    rounded = ops.convert_to_numpy(ops.cast(ops.cast(exact, "bfloat16"), "float32"))
    got = ops.convert_to_numpy(ops.cast(gops.rms_normalize(x, 1e-7), "float32"))
    assert np.mean(got == rounded) > 0.99  # (float32 round-off may flip a tie)
    row_scale = np.sum(got * exact, axis=-1) / np.sum(exact * exact, axis=-1)
    assert np.abs(row_scale - 1).max() < 2.0**-11


@pytest.mark.both_backends
@pytest.mark.parametrize("b_shape", [(64, 32), (2, 64, 32)])
def test_matmul_rounds_to_nearest_in_bfloat16(rng, b_shape):
    """gops.matmul in bfloat16: the float32 product rounded to nearest (TensorFlow's CPU kernel
    truncates: -0.28% on every result), for a Dense's [K, N] kernel and a batched product;
    its gradient equals float32 autodiff's within bfloat16's precision."""
    a = (rng.normal(size=(2, 8, 64))).astype("float32")
    b = (rng.normal(size=b_shape)).astype("float32")
    a16, b16 = ops.cast(a, "bfloat16"), ops.cast(b, "bfloat16")
    exact = ops.convert_to_numpy(ops.matmul(ops.cast(a16, "float32"), ops.cast(b16, "float32")))
    got = ops.convert_to_numpy(ops.cast(gops.matmul(a16, b16), "float32"))
    assert np.all(np.abs(got - exact) <= 2.0**-8 * np.abs(exact) + 1e-5)
    relative = ((got - exact) / np.abs(exact))[np.abs(exact) > 0.1]
    assert abs(relative.mean()) < 5e-4  # truncation: -2.8e-3
    weight = rng.normal(size=exact.shape).astype("float32")
    ours = gradients(
        lambda u, v: ops.sum(
            ops.cast(gops.matmul(ops.cast(u, "bfloat16"), ops.cast(v, "bfloat16")), "float32") * weight
        ),
        [a, b],
    )
    plain = gradients(lambda u, v: ops.sum(ops.matmul(u, v) * weight), [a, b])
    for mine, reference in zip(ours, plain):
        mine, reference = ops.convert_to_numpy(mine), ops.convert_to_numpy(reference)
        np.testing.assert_allclose(mine, reference, atol=2e-2 * np.abs(reference).max())


@pytest.mark.both_backends
def test_hand_written_gradients_differentiate_again(rng):
    """A gradient penalty (bert4keras's adversarial-training idiom) differentiates the
    gradient: both hand-written backward passes are differentiable, as autodiff's are."""
    x = rng.normal(size=(2, 3, 6)).astype("float32")
    weight = rng.normal(size=(2, 3, 6)).astype("float32")

    def penalty(normalize, softmax):
        def loss(v):
            inner = gradients(lambda u: ops.sum(softmax(normalize(u)) * weight), [v])[0]
            return ops.sum(ops.square(inner))

        return loss

    ours = gradients(penalty(lambda u: gops.rms_normalize(u, 1e-7), lambda u: gops.masked_softmax(u)), [x])[0]
    plain = gradients(penalty(lambda u: _plain_rms(u, 1e-7), lambda u: _plain_softmax(u, None)), [x])[0]
    np.testing.assert_allclose(ops.convert_to_numpy(ours), ops.convert_to_numpy(plain), rtol=1e-4, atol=1e-6)


def test_key_lengths_cut_long_caches_in_blocks():
    assert gops.key_lengths(511) == (511,)  # short: one length, no branch to compile
    lengths = gops.key_lengths(1040)
    assert lengths[-1] == 1040 and len(lengths) <= 17 and lengths[0] >= 64 and lengths[0] % 16 == 0
    assert all(b - a == lengths[0] for a, b in zip(lengths, lengths[1:-1]))
    assert gops.key_lengths(32, smallest=4) == (4, 8, 12, 16, 20, 24, 28, 32)


@pytest.mark.both_backends
@pytest.mark.parametrize("filled", [1, 4, 5, 17, 32])
def test_over_filled_slots_is_the_uncut_attention_over_the_shortest_length(rng, monkeypatch, filled):
    """Keys and values positions last, [B, d, N]; slots >= filled masked: the cut call gives the
    uncut one's output, and attends over the shortest of ``key_lengths`` holding the filled slots."""
    monkeypatch.setattr(gops, "key_lengths", lambda slots: tuple(range(4, slots + 1, 4)))
    q = rng.normal(size=(2, 3, 8)).astype("float32")
    k, v = rng.normal(size=(2, 8, 32)).astype("float32"), rng.normal(size=(2, 6, 32)).astype("float32")
    visible = np.broadcast_to(np.arange(32) < filled, (2, 3, 32)) & (rng.random((2, 3, 32)) < 0.8)
    visible[:, :, 0] = True

    def attend(q, k, v, visible):
        a = gops.masked_softmax(ops.matmul(q, k), visible)
        return ops.einsum("bjk,bdk->bjd", a, v), ops.convert_to_tensor(k.shape[-1], "int32")

    expected, _ = attend(q, k, v, visible)
    got, length = gops.over_filled_slots(attend, filled, [(q, None), (k, -1), (v, -1), (visible, -1)])
    np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(expected), rtol=1e-6, atol=1e-7)
    assert int(ops.convert_to_numpy(length)) == max(4, -(-filled // 4) * 4)
