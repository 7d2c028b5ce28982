"""GAU-α's training maths written directly in JAX, without Keras: the yardstick of issue 34.

The same computation as ``build_transformer_model(config, model='gau_alpha')`` on unmasked inputs
(every token id > 0), dropout 0:

    x = rms(E_tok[ids] + E_seg[segments])                                     [B, L, H]
    per layer:  u, v, qk = split(swish(x W_i), [e, e, s])
                q, k = rope(qk γ_q), rope(qk γ_k);  q *= ln(max(L, 16)) / ln(512) / √s
                x = rms(x + (u ⊙ softmax(q kᵀ) v) W_o)

with ``rms(x) = x / √(mean(x²) + 1e-7)``. Weights are float32 (the master copy); under
``compute_dtype=bfloat16`` the matrix products take bfloat16 operands with float32 accumulation and the
norms and the softmax run in float32, as the issue's plain-JAX measurement did. A step is one Adam update
(Keras's defaults: β 0.9 / 0.999, ε 1e-7) on the MSE of the hidden states; nothing but ``jax`` is used,
so XLA sees the maths and none of the framework. ``gpu_train_step.py`` times it next to our GAU-α: the
ratio of the two is what the framework and our layers cost on top of the maths.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np


def params_from_model(model, layers):
    """The weights of our GAU-α Keras model as this module's float32 pytree."""

    def weight(layer, name):
        found = [v for v in model.get_layer(layer).weights if v.path.endswith(name)]
        return jnp.asarray(np.asarray(found[0].value), jnp.float32)

    blocks = []
    for i in range(layers):
        layer = f"Transformer-{i}-GatedAttentionUnit"
        blocks.append(
            {
                "w_i": weight(layer, "i_dense/kernel"),
                "gamma_q": weight(layer, "q_scaleoffset/gamma"),
                "gamma_k": weight(layer, "k_scaleoffset/gamma"),
                "w_o": weight(layer, "o_dense/kernel"),
            }
        )
    return {
        "token": weight("Embedding-Token", "embeddings"),
        "segment": weight("Embedding-Segment", "embeddings"),
        "layers": blocks,
    }


def _rms(x, epsilon=1e-7):
    x = x.astype(jnp.float32)
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + epsilon)


def _rope(x, sin, cos):
    """Interleaved RoPE of x [B, L, s] from the [L, s/2] sin and cos halves."""
    even, odd = x[..., ::2], x[..., 1::2]
    return jnp.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1).reshape(x.shape)


def _gau(x, block, sin, cos, compute_dtype):
    """One GAU layer and its post-norm: x [B, L, H] float32 → [B, L, H] float32."""
    c = lambda t: t.astype(compute_dtype)  # noqa: E731
    e, s = block["w_o"].shape[0], block["gamma_q"].shape[0]
    h = jax.nn.silu(jnp.einsum("blh,hd->bld", c(x), c(block["w_i"]), preferred_element_type=jnp.float32))
    u, v, qk = c(h[..., :e]), c(h[..., e : 2 * e]), h[..., 2 * e :]
    length = x.shape[1]
    scale = math.log(max(length, 16)) / math.log(512) / math.sqrt(s)
    q = c(_rope(qk * block["gamma_q"], sin, cos) * scale)
    k = c(_rope(qk * block["gamma_k"], sin, cos))
    logits = jnp.einsum("bms,bns->bmn", q, k, preferred_element_type=jnp.float32)
    p = c(jax.nn.softmax(logits, axis=-1))
    o = u * c(jnp.einsum("bmn,bnd->bmd", p, v, preferred_element_type=jnp.float32))
    y = jnp.einsum("bld,dh->blh", o, c(block["w_o"]), preferred_element_type=jnp.float32)
    return _rms(x + y)


def forward(params, ids, segments, compute_dtype="float32"):
    """Hidden states [B, L, H] float32 of ids, segments [B, L] int32."""
    s = params["layers"][0]["gamma_q"].shape[0]
    theta = jnp.arange(ids.shape[1], dtype=jnp.float32)[:, None] * 10000.0 ** (-2 * jnp.arange(s // 2) / s)
    sin, cos = jnp.sin(theta), jnp.cos(theta)
    x = _rms(params["token"][ids] + params["segment"][segments])
    for block in params["layers"]:
        x = _gau(x, block, sin, cos, compute_dtype)
    return x


def train_step(params, batch, length, compute_dtype, seed=0, learning_rate=1e-4):
    """(step() → loss, the jitted step, its arguments' shapes), as ``gpu_train_step.train_step``."""
    rng = np.random.default_rng(seed)
    ids = jnp.asarray(rng.integers(1, params["token"].shape[0], (batch, length)), jnp.int32)
    segments = jnp.zeros_like(ids)
    targets = jnp.asarray(rng.normal(size=(batch, length, params["token"].shape[1])), jnp.float32)
    b1, b2, eps = 0.9, 0.999, 1e-7

    def loss_fn(p):
        return jnp.mean(jnp.square(forward(p, ids, segments, compute_dtype) - targets))

    def step(p, m, v, t):
        loss, grads = jax.value_and_grad(loss_fn)(p)
        t = t + 1
        m = jax.tree.map(lambda a, g: b1 * a + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda a, g: b2 * a + (1 - b2) * g * g, v, grads)
        rate = learning_rate * jnp.sqrt(1 - b2**t) / (1 - b1**t)
        p = jax.tree.map(lambda w, a, b: w - rate * a / (jnp.sqrt(b) + eps), p, m, v)
        return p, m, v, t, loss

    jitted = jax.jit(step, donate_argnums=(0, 1, 2))
    zeros = jax.tree.map(jnp.zeros_like, params)
    state = [params, zeros, jax.tree.map(jnp.zeros_like, params), jnp.zeros((), jnp.float32)]
    example = [jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), part) for part in state]

    def run():
        *new, loss = jitted(*state)
        state[:] = new
        return loss

    return run, jitted, example
