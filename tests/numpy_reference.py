"""Plain-numpy GAU-alpha / RoFormerV2, written from the equations of docs/models.md.

Independent of gau_keras's code paths: used as the reference the Keras
layers and models are tested against. Weights are looked up by the original
checkpoint variable names. Everything is float64.
"""

import numpy as np


def swish(x):
    return x / (1.0 + np.exp(-x))


def relu(x):
    return np.maximum(x, 0.0)


ACTIVATIONS = {"swish": swish, "relu": relu, "linear": lambda x: x}


def rms_norm(x, eps=1e-7):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def softmax(a):
    a = a - np.max(a, axis=-1, keepdims=True)
    e = np.exp(a)
    return e / e.sum(-1, keepdims=True)


def key_mask(token_ids):
    mask = token_ids != 0
    mask[:, 0] = True
    return mask


def sinusoidal(length, dim):
    """[L, dim] laid out sin θ0, cos θ0, sin θ1, cos θ1, ..."""
    out = np.zeros((length, dim))
    for p in range(length):
        for i in range(dim // 2):
            theta = p * 10000.0 ** (-2.0 * i / dim)
            out[p, 2 * i] = np.sin(theta)
            out[p, 2 * i + 1] = np.cos(theta)
    return out


def rotary(x, table):
    """x [..., L, d] (or [B, L, H, d] with table broadcast by the caller)."""
    cos = np.repeat(table[..., 1::2], 2, axis=-1)
    sin = np.repeat(table[..., ::2], 2, axis=-1)
    rotated = np.empty_like(x)
    rotated[..., ::2] = -x[..., 1::2]
    rotated[..., 1::2] = x[..., ::2]
    return x * cos + rotated * sin


def visibility(token_ids, segment_ids, application):
    """bool [B, L, L]: may query i attend to key j (padding excluded)."""
    batch, length = token_ids.shape
    visible = np.ones((batch, length, length), bool)
    if application == "lm":
        visible &= np.tril(np.ones((length, length), bool))[None]
    elif application == "unilm":
        c = np.cumsum(segment_ids, axis=1)
        visible &= c[:, None, :] <= c[:, :, None]
    return visible


def normalize(a, keys, visible, method, min_len):
    """a [B, (H,) L, L]; keys bool [B, L]; visible bool [B, L, L].

    n = the number of keys each query may attend to (bert4keras >= 0.11.5).
    """
    allowed = visible & keys[:, None, :]
    if a.ndim == 4:
        allowed = allowed[:, None]
    n = allowed.sum(-1, keepdims=True).astype(float)
    if method == "softmax":
        return softmax(np.where(allowed, a, -np.inf))
    if method == "softmax_plus":
        scale = np.log(np.maximum(n, min_len)) / np.log(512.0)
        return softmax(np.where(allowed, a * scale, -np.inf))
    if method == "squared_relu":
        return np.where(allowed, relu(a) ** 2, 0.0) / n
    raise ValueError(method)


def gau(x, w, prefix, keys, visible, key_size, units, min_len, table):
    z = swish(x @ w[prefix + "i_dense/kernel"])
    u, v, qk = z[..., :units], z[..., units : 2 * units], z[..., 2 * units :]
    q = qk * w[prefix + "q_scaleoffset/gamma"]
    k = qk * w[prefix + "k_scaleoffset/gamma"]
    q, k = rotary(q, table), rotary(k, table)
    a = np.einsum("bmd,bnd->bmn", q, k) / np.sqrt(key_size)
    attention = normalize(a, keys, visible, "softmax_plus", min_len)
    return (u * np.einsum("bmn,bnd->bmd", attention, v)) @ w[prefix + "o_dense/kernel"]


def mha(x, w, prefix, keys, visible, heads, table):
    def split(t):
        return t.reshape(t.shape[0], t.shape[1], heads, -1)

    q = split(x @ w[prefix + "attention/self/query/kernel"])
    k = split(x @ w[prefix + "attention/self/key/kernel"])
    v = split(x @ w[prefix + "attention/self/value/kernel"])
    q, k = rotary(q, table[:, None, :]), rotary(k, table[:, None, :])
    a = np.einsum("bjhd,bkhd->bhjk", q, k) / np.sqrt(q.shape[-1])
    attention = normalize(a, keys, visible, "softmax", 1)
    o = np.einsum("bhjk,bkhd->bjhd", attention, v).reshape(x.shape[0], x.shape[1], -1)
    return o @ w[prefix + "attention/output/dense/kernel"]


def embed(w, token_ids, segment_ids, eps):
    x = w["bert/embeddings/word_embeddings"][token_ids] + w["bert/embeddings/token_type_embeddings"][segment_ids]
    return rms_norm(x, eps)


def mlm_logits(w, h):
    return h @ w["bert/embeddings/word_embeddings"].T


def gau_alpha_forward(
    w, token_ids, segment_ids, num_layers, key_size, units, min_len=16, application="encoder", eps=1e-7
):
    """Returns (hidden [B, L, H], mlm logits [B, L, V])."""
    keys = key_mask(token_ids)
    visible = visibility(token_ids, segment_ids, application)
    table = sinusoidal(token_ids.shape[1], key_size)
    x = embed(w, token_ids, segment_ids, eps)
    for i in range(num_layers):
        prefix = f"GAU_alpha/encoder/layer_{i}/gau/"
        x = rms_norm(x + gau(x, w, prefix, keys, visible, key_size, units, min_len, table), eps)
    return x, mlm_logits(w, x)


def roformer_v2_forward(w, token_ids, segment_ids, num_layers, heads, application="encoder", eps=1e-7):
    keys = key_mask(token_ids)
    visible = visibility(token_ids, segment_ids, application)
    head_size = w["bert/encoder/layer_0/attention/self/query/kernel"].shape[1] // heads
    table = sinusoidal(token_ids.shape[1], head_size)
    x = embed(w, token_ids, segment_ids, eps)
    for i in range(num_layers):
        prefix = f"bert/encoder/layer_{i}/"
        x = rms_norm(x + mha(x, w, prefix, keys, visible, heads, table), eps)
        ffn = relu(x @ w[prefix + "intermediate/dense/kernel"]) @ w[prefix + "output/dense/kernel"]
        x = rms_norm(x + ffn, eps)
    return x, mlm_logits(w, x)
