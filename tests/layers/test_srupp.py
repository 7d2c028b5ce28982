"""gau_keras.layers.srupp against a numpy transcription of the official SRU++
(time-major, torch weight layouts), plus masking, memory and serialisation."""

import re

import keras
import numpy as np
import pytest
from keras import ops

from gau_keras.layers import SRUpp, SRUppAttention, SRUppCell, SRUppProjectedLinear
from tests.harness import PADDING, floats, run_layer_test

# ---------------------------------------------------------------- numpy reference


def np_layer_norm(x, weight, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * weight + bias


def np_attention(sd, p, x, memory, mask_pad, attn_add, num_heads):
    """x [L, B, d_in], memory [M, B, d_in] or None, mask_pad [L, B] (True = pad),
    attn_add [L, M + L] additive; post layer norm as in the reference's SRUpp."""
    L, B, _ = x.shape
    M = 0 if memory is None else memory.shape[0]
    z = np.concatenate([memory, x]) @ sd[p + "linear1.weight"].T if M else x @ sd[p + "linear1.weight"].T
    residual = z[M:]
    k, v = np.split(z @ sd[p + "linear2.weight"].T, 2, axis=-1)
    proj = z.shape[-1]
    hd = proj // num_heads
    heads = lambda t: t.reshape(t.shape[0], B * num_heads, hd).transpose(1, 0, 2)  # noqa: E731
    scores = heads(z[M:] * hd**-0.5) @ heads(k).transpose(0, 2, 1)  # [B*H, L, M+L]
    if attn_add is not None:
        scores = scores + attn_add[None]
    if mask_pad is not None:
        key_pad = np.concatenate([np.zeros((M, B), bool), mask_pad]) if M else mask_pad
        scores = scores.reshape(B, num_heads, L, M + L)
        scores = np.where(key_pad.T[:, None, None, :], -np.inf, scores).reshape(B * num_heads, L, M + L)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = (probs @ heads(v)).transpose(1, 0, 2).reshape(L, B, proj)
    out = out * sd[p + "alpha"] + residual
    if p + "layer_norm.weight" in sd:
        out = np_layer_norm(out, sd[p + "layer_norm.weight"], sd[p + "layer_norm.bias"])
    return out @ sd[p + "linear3.weight"].T


def np_projected_linear(sd, p, x):
    z = x @ sd[p + "linear1.weight"].T
    if p + "layer_norm.weight" in sd:
        z = np_layer_norm(z, sd[p + "layer_norm.weight"], sd[p + "layer_norm.bias"])
    return z @ sd[p + "linear2.weight"].T


def np_recurrence(U, x, weight_c, bias, c0, mask_pad, scale_x, dirs, d):
    """Time-major loop of the reference's elementwise recurrence."""
    L, B, _ = U.shape
    k = U.shape[-1] // (dirs * d)
    U = U.reshape(L, B, dirs, d, k)
    w, b = weight_c.reshape(2, dirs, d), bias.reshape(2, dirs, d)
    sig = lambda t: 1 / (1 + np.exp(-t))  # noqa: E731
    h = np.zeros((L, B, dirs, d))
    c_last = np.zeros((B, dirs, d))
    for di in range(dirs):
        c = c0.reshape(B, dirs, d)[:, di]
        for t in range(L) if di == 0 else reversed(range(L)):
            u = U[t, :, di]
            xp = u[..., 3] if k == 4 else x.reshape(L, B, dirs, d)[t, :, di] * scale_x
            f = sig(u[..., 1] + c * w[0, di] + b[0, di])
            r = sig(u[..., 2] + c * w[1, di] + b[1, di])
            c_new = u[..., 0] + (c - u[..., 0]) * f
            pad = mask_pad[t][:, None] if mask_pad is not None else np.zeros((B, 1), bool)
            h[t, :, di] = np.where(pad, 0.0, xp + (c_new - xp) * r)
            c = np.where(pad, c, c_new)
        c_last[:, di] = c
    return h.reshape(L, B, dirs * d), c_last.reshape(B, dirs * d)


def np_srupp(sd, cfg, x, c0=None, mask_pad=None, attn_add=None, memory=None):
    """The reference SRUpp.forward (eval mode): x [L, B, d_in] → (h, c [layers, B, dirs·d], layer inputs)."""
    dirs = 2 if cfg.get("bidirectional") else 1
    d = cfg["hidden_size"]
    heads = cfg.get("num_heads", 1)
    if "input_to_hidden.weight" in sd:
        x = x @ sd["input_to_hidden.weight"].T
    cs, inputs = [], []
    for i in range(cfg["num_layers"]):
        p = f"rnn_lst.{i}."
        inputs.append(x)
        residual = x
        pre = cfg.get("layer_norm") and not cfg.get("normalize_after")
        xin = np_layer_norm(x, sd[p + "layer_norm.weight"], sd[p + "layer_norm.bias"]) if pre else x
        mem = None if memory is None else memory[i]
        if p + "transform_module.linear3.weight" in sd:
            U = np_attention(sd, p + "transform_module.", xin, mem, mask_pad, attn_add, heads)
        else:
            U = np_projected_linear(sd, p + "transform_module.", xin)
        scale = np.sqrt(1 + 2 * np.exp(cfg.get("highway_bias", -2.0))) if cfg.get("rescale") else 1.0
        c_init = np.zeros((x.shape[1], dirs * d)) if c0 is None else c0[i]
        x, c = np_recurrence(U, residual, sd[p + "weight_c"], sd[p + "bias"], c_init, mask_pad, scale, dirs, d)
        if cfg.get("layer_norm") and cfg.get("normalize_after"):
            x = np_layer_norm(x, sd[p + "layer_norm.weight"], sd[p + "layer_norm.bias"])
        cs.append(c)
    return x, np.stack(cs), inputs


def random_state_dict(rng, cfg, d_in):
    """A state dict with the official keys and torch shapes, random values."""
    dirs = 2 if cfg.get("bidirectional") else 1
    out, p, L = cfg["hidden_size"] * dirs, cfg["proj_size"], cfg["num_layers"]
    sd = {}
    width = d_in
    if cfg.get("proj_input_to_hidden_first") and d_in != out:
        sd["input_to_hidden.weight"] = rng.normal(size=(out, d_in)) / np.sqrt(d_in)
        width = out
    every, last = cfg.get("attention_every_n_layers", 1), cfg.get("attention_last_n_layers", -1)
    for i in range(L):
        k = 3 if width == out else 4
        pre = f"rnn_lst.{i}."
        sd[pre + "weight_c"] = rng.uniform(-1, 1, size=2 * out)
        sd[pre + "bias"] = rng.normal(size=2 * out) * 0.3
        sd[pre + "scale_x"] = np.array([np.sqrt(1 + 2 * np.exp(cfg.get("highway_bias", -2.0)))])
        if cfg.get("layer_norm"):
            n = out if cfg.get("normalize_after") else width
            sd[pre + "layer_norm.weight"] = 1 + 0.1 * rng.normal(size=n)
            sd[pre + "layer_norm.bias"] = 0.1 * rng.normal(size=n)
        t = pre + "transform_module."
        attention = (L - i <= last) if last != -1 else ((i + 1) % every == 0)
        sd[t + "linear1.weight"] = rng.normal(size=(p, width)) / np.sqrt(width)
        if attention:
            sd[t + "linear2.weight"] = rng.normal(size=(2 * p, p)) / np.sqrt(p)
            sd[t + "linear3.weight"] = rng.normal(size=(out * k, p)) / np.sqrt(p)
            sd[t + "alpha"] = np.array([0.7])
        else:
            sd[t + "linear2.weight"] = rng.normal(size=(out * k, p)) / np.sqrt(p)
        if cfg.get("attn_layer_norm", True):
            sd[t + "layer_norm.weight"] = 1 + 0.1 * rng.normal(size=p)
            sd[t + "layer_norm.bias"] = 0.1 * rng.normal(size=p)
        width = out
    return sd


def causal_additive(L, M=0):
    allowed = np.tril(np.ones((L, M + L), bool), k=M)
    return np.where(allowed, 0.0, -np.inf), allowed


def build_layer(cfg, sd, d_in):
    layer = SRUpp(**cfg, dtype="float64")
    layer.build((None, None, d_in))
    layer.load_reference_state_dict(sd)
    return layer


# ---------------------------------------------------------------- tests

CONFIGS = {
    "uni-k4-causal": dict(hidden_size=4, proj_size=6, num_layers=2, num_heads=2),
    "bi-layernorm-pre": dict(hidden_size=3, proj_size=4, num_layers=2, bidirectional=True, layer_norm=True),
    "post-norm-rescale-every2": dict(
        hidden_size=4,
        proj_size=4,
        num_layers=3,
        layer_norm=True,
        normalize_after=True,
        rescale=True,
        attention_every_n_layers=2,
    ),
    "last1-input-to-hidden": dict(
        hidden_size=4,
        proj_size=4,
        num_layers=2,
        attention_last_n_layers=1,
        attn_layer_norm=False,
        proj_input_to_hidden_first=True,
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_numpy_reference(rng, name):
    cfg = CONFIGS[name]
    B, L, d_in = 2, 5, 3
    sd = random_state_dict(rng, cfg, d_in)
    layer = build_layer(cfg, sd, d_in)
    x = rng.normal(size=(B, L, d_in))
    keep = np.ones((B, L), bool)
    keep[1, 3:] = False
    causal = not cfg.get("bidirectional")
    additive, allowed = causal_additive(L) if causal else (None, None)
    c0 = rng.normal(size=(cfg["num_layers"], B, cfg["hidden_size"] * (2 if cfg.get("bidirectional") else 1)))
    h_ref, c_ref, _ = np_srupp(sd, cfg, x.transpose(1, 0, 2), c0=c0, mask_pad=~keep.T, attn_add=additive)
    h, c = layer(
        x, mask=keep, attention_mask=None if allowed is None else allowed[None], initial_state=c0, return_state=True
    )
    np.testing.assert_allclose(ops.convert_to_numpy(h), h_ref.transpose(1, 0, 2), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(ops.convert_to_numpy(c), c_ref, rtol=1e-9, atol=1e-10)


def test_attention_transform_with_memory_matches_numpy(rng):
    B, L, M, d_in, p, out = 2, 4, 3, 5, 6, 12
    layer = SRUppAttention(p, out, num_heads=3, dtype="float64")
    layer.build((None, None, d_in))
    sd = {
        "linear1.weight": rng.normal(size=(p, d_in)),
        "linear2.weight": rng.normal(size=(2 * p, p)),
        "linear3.weight": rng.normal(size=(out, p)),
        "alpha": np.array([0.4]),
        "layer_norm.weight": 1 + 0.1 * rng.normal(size=p),
        "layer_norm.bias": 0.1 * rng.normal(size=p),
    }
    for name in ("linear1", "linear2", "linear3"):
        getattr(layer, name).kernel.assign(sd[name + ".weight"].T)
    layer.alpha.assign(sd["alpha"])
    layer.norm.gamma.assign(sd["layer_norm.weight"])
    layer.norm.beta.assign(sd["layer_norm.bias"])
    x, memory = rng.normal(size=(B, L, d_in)), rng.normal(size=(B, M, d_in))
    keep = np.ones((B, L), bool)
    keep[0, -1] = False
    additive, allowed = causal_additive(L, M)
    U = layer(x, mask=keep, attention_mask=allowed, memory=memory)
    U_ref = np_attention(sd, "", x.transpose(1, 0, 2), memory.transpose(1, 0, 2), ~keep.T, additive, 3)
    np.testing.assert_allclose(ops.convert_to_numpy(U), U_ref.transpose(1, 0, 2), rtol=1e-9, atol=1e-10)


def test_alpha_starts_at_zero_and_init_follows_reference():
    layer = SRUpp(hidden_size=4, proj_size=4, num_layers=2, highway_bias=-3.0, weight_c_init=0.5)
    layer.build((None, None, 4))
    cell = layer.cells[0]
    assert float(ops.convert_to_numpy(cell.transform.alpha)[0]) == 0.0
    bias = ops.convert_to_numpy(cell.bias)
    np.testing.assert_array_equal(bias, [0.0] * 4 + [-3.0] * 4)
    assert np.all(np.abs(ops.convert_to_numpy(cell.weight_c)) <= 0.5)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_padding_does_not_change_valid_outputs(rng, bidirectional):
    layer = SRUpp(hidden_size=4, proj_size=4, num_layers=2, num_heads=2, bidirectional=bidirectional)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    keep = np.ones((2, 6), bool)
    keep[:, 4:] = False
    h = ops.convert_to_numpy(layer(x, mask=keep))
    x2 = x.copy()
    x2[:, 4:] = rng.normal(size=(2, 2, 8))
    h2 = ops.convert_to_numpy(layer(x2, mask=keep))
    h_short = ops.convert_to_numpy(layer(x[:, :4]))
    np.testing.assert_allclose(h[:, :4], h2[:, :4], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h[:, :4], h_short, rtol=1e-5, atol=1e-6)
    assert np.all(h[:, 4:] == 0.0)


def test_memory_equals_concatenated_sequence(rng):
    """Causal LM: segment 2 with memory (segment 1's layer inputs) and the carried
    state gives what the whole sequence gives at segment 2's positions."""
    cfg = dict(hidden_size=4, proj_size=6, num_layers=3, num_heads=2, attention_every_n_layers=2)
    d_in, B, L1, L2 = 4, 2, 3, 4
    sd = random_state_dict(rng, cfg, d_in)
    layer = build_layer(cfg, sd, d_in)
    x = rng.normal(size=(B, L1 + L2, d_in))
    whole = ops.convert_to_numpy(layer(x, attention_mask=np.tril(np.ones((L1 + L2, L1 + L2), bool))))
    _, c1, inputs = np_srupp(sd, cfg, x[:, :L1].transpose(1, 0, 2), attn_add=causal_additive(L1)[0])
    memory = [t.transpose(1, 0, 2) for t in inputs]
    h2 = layer(x[:, L1:], attention_mask=causal_additive(L2, L1)[1], initial_state=c1, memory=memory)
    np.testing.assert_allclose(ops.convert_to_numpy(h2), whole[:, L1:], rtol=1e-9, atol=1e-10)


def test_keras_round_trip_and_training_step(tmp_path, rng):
    inputs = keras.Input((None,), dtype="int32")
    emb = keras.layers.Embedding(20, 8, mask_zero=True)(inputs)
    h = SRUpp(
        hidden_size=4,
        proj_size=4,
        num_layers=2,
        bidirectional=True,
        dropout=0.1,
        attn_dropout=0.1,
        layer_norm=True,
        rescale=True,
        name="srupp",
    )(emb)
    model = keras.Model(inputs, keras.layers.Dense(3)(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens = rng.integers(1, 20, size=(4, 7))
    tokens[0, 5:] = 0
    history = model.fit(tokens, rng.integers(0, 3, size=(4, 7)), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    path = tmp_path / "srupp.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(
        ops.convert_to_numpy(restored(tokens)), ops.convert_to_numpy(model(tokens)), rtol=1e-6, atol=1e-6
    )
    assert restored.get_layer("srupp").get_config() == model.get_layer("srupp").get_config()


def test_state_dict_errors_name_the_key(rng):
    cfg = dict(hidden_size=4, proj_size=4, num_layers=2)
    sd = random_state_dict(rng, cfg, 4)
    layer = SRUpp(**cfg)
    layer.build((None, None, 4))
    missing = {k: v for k, v in sd.items() if k != "rnn_lst.1.weight_c"}
    with pytest.raises(KeyError, match="rnn_lst.1.weight_c"):
        layer.load_reference_state_dict(missing)
    with pytest.raises(ValueError, match="rnn_lst.0.transform_module.linear1.weight"):
        layer.load_reference_state_dict({**sd, "rnn_lst.0.transform_module.linear1.weight": np.zeros((4, 5))})
    with pytest.raises(ValueError, match="unexpected keys.*extra"):
        layer.load_reference_state_dict({**sd, "extra": np.zeros(1)})


def test_mixed_precision_runs_in_float32_inside(rng):
    layer = SRUpp(hidden_size=4, proj_size=4, num_layers=2, dtype="mixed_bfloat16")
    x = rng.normal(size=(2, 5, 3)).astype("float32")
    reference = SRUpp(hidden_size=4, proj_size=4, num_layers=2)
    reference.build((None, None, 3))
    layer.build((None, None, 3))
    layer.set_weights(reference.get_weights())
    h = layer(x)
    assert keras.backend.standardize_dtype(h.dtype) == "bfloat16"
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(h, "float32")), ops.convert_to_numpy(reference(x)), rtol=0.05, atol=0.05
    )


@pytest.mark.both_backends
@pytest.mark.parametrize("shape", [(2, 8), (2, 3, 1, 8)])
def test_an_input_of_the_wrong_rank_names_the_layout_and_the_shape(shape):
    from gau_keras.layers import SRUppCell

    expected = rf"the input must be \[batch, length, features\] \(rank 3\), got shape {re.escape(str(shape))}"
    for layer in (SRUpp(hidden_size=8, proj_size=4, num_layers=1), SRUppCell(8, 4), SRUppCell(8, 4, attention=False)):
        for x in (np.zeros(shape, "float32"), keras.Input(shape[1:], batch_size=2)):
            with pytest.raises(ValueError, match=f"^{layer.name}: {expected}$"):
                layer(x)
        layer(np.zeros((2, 3, 8), "float32"))  # a later call, once the layer is built
        with pytest.raises(ValueError, match=f"^{layer.name}: {expected}$"):
            layer(np.zeros(shape, "float32"))
    with pytest.raises(
        ValueError,
        match=r"^sr_upp_cell\w*: the memory must be \[batch, memory_length, features\] "
        r"\(rank 3\), got shape \(2, 8\)$",
    ):
        layer(np.zeros((2, 3, 8), "float32"), memory=np.zeros((2, 8), "float32"))


@pytest.mark.both_backends
def test_srupp_passes_the_layer_harness():
    run_layer_test(SRUpp, {"hidden_size": 8, "proj_size": 4}, floats(2, 5, 8), (2, 5, 8), input_mask=PADDING)


@pytest.mark.both_backends
def test_srupp_cell_passes_the_layer_harness():
    run_layer_test(SRUppCell, {"hidden_size": 8, "proj_size": 4}, floats(2, 5, 8), (2, 5, 8), input_mask=PADDING)


@pytest.mark.both_backends
def test_srupp_attention_passes_the_layer_harness():
    run_layer_test(
        SRUppAttention, {"proj_size": 4, "out_features": 12}, floats(2, 5, 8), (2, 5, 12), input_mask=PADDING
    )


@pytest.mark.both_backends
def test_srupp_projected_linear_passes_the_layer_harness():
    run_layer_test(
        SRUppProjectedLinear, {"proj_size": 4, "out_features": 12}, floats(2, 5, 8), (2, 5, 12), input_mask=PADDING
    )
