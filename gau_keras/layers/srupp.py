"""SRU++ (docs/srupp.md): the attention / projected-linear transforms that produce
U, the cell (transform + recurrence), and the stack ``SRUpp``.

Computes exactly what the official PyTorch ``sru.SRUpp`` (v3) computes, on
batch-major input; ``SRUpp.load_reference_state_dict`` loads its weights.

    layer = SRUpp(hidden_size=256, proj_size=64, num_layers=2)
    h = layer(x)                                   # x: [B, L, d_in] → h: [B, L, dirs·256]
    h, c = layer(x, mask=mask, return_state=True)  # c: [num_layers, B, dirs·256]
"""

import math

import keras
import numpy as np
from keras import ops

from gau_keras import ops as gops
from gau_keras.recurrence import sru_recurrence
from gau_keras.registration import PACKAGE

_LN_EPSILON = 1e-5  # PyTorch's LayerNorm default; parity with the reference depends on it


def _glorot(dropout):
    """torch xavier_uniform, times sqrt(1 − dropout) as the reference does before dropout."""
    return keras.initializers.VarianceScaling(1.0 - dropout, mode="fan_avg", distribution="uniform")


def _linear(units, dropout=0.0, name=None, dtype=None):
    return keras.layers.Dense(units, use_bias=False, kernel_initializer=_glorot(dropout), name=name, dtype=dtype)


def _layer_norm(dtype):
    return keras.layers.LayerNormalization(epsilon=_LN_EPSILON, name="layer_norm", dtype=dtype)


def check_rank(layer, shape, what="input", expected="[batch, length, features]"):
    """A one-line error naming ``layer``, the ``expected`` layout and the ``shape`` given
    when ``shape`` is not of rank 3 (the SRU++ layers read sequences only)."""
    shape = tuple(shape)
    if len(shape) != 3:
        raise ValueError(f"{layer.name}: the {what} must be {expected} (rank 3), got shape {shape}")


class _SequenceLayer(keras.layers.Layer):
    """A layer of [batch, length, features] inputs: another rank is refused before Keras's call
    machinery (which would wrap the message in its notes, or fail inside the transform)."""

    def __call__(self, inputs, *args, **kwargs):
        if hasattr(inputs, "shape"):
            check_rank(self, inputs.shape)
        memory = kwargs.get("memory")
        if hasattr(memory, "shape"):
            check_rank(self, memory.shape, "memory", "[batch, memory_length, features]")
        return super().__call__(inputs, *args, **kwargs)


def _key_padding_mask(mask, memory):
    """[B, L] keep-mask → [B, 1, 1, M + L]; memory positions are always valid."""
    if memory is not None:
        mask = ops.concatenate([ops.ones(ops.shape(memory)[:2], "bool"), mask], axis=1)
    return mask[:, None, None, :]


@keras.saving.register_keras_serializable(package=PACKAGE)
class SRUppAttention(keras.layers.Layer):
    """The attention transform: x [B, L, d_in] (+ memory [B, M, d_in]) → U [B, L, out_features].

    z = x W1; q = z (or LN(z) before attention when normalize_after=False);
    [k, v] = z' W2 over memory and input; o = α·MHA(q, k, v) + z;
    o = LN(o) when normalize_after; U = dropout(o) W3.
    With ``causal`` query i also sees only keys up to M + i (all the memory).
    """

    def __init__(
        self,
        proj_size,
        out_features,
        num_heads=1,
        dropout=0.0,
        attn_dropout=0.0,
        layer_norm=True,
        normalize_after=True,
        causal=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if proj_size % num_heads:
            raise ValueError(f"SRUppAttention: proj_size ({proj_size}) must be divisible by num_heads ({num_heads})")
        self.proj_size, self.out_features, self.num_heads = proj_size, out_features, num_heads
        self.dropout, self.attn_dropout = dropout, attn_dropout
        self.layer_norm, self.normalize_after, self.causal = layer_norm, normalize_after, causal
        dtype = self.dtype_policy
        self.linear1 = _linear(proj_size, name="linear1", dtype=dtype)
        self.linear2 = _linear(2 * proj_size, name="linear2", dtype=dtype)
        self.linear3 = _linear(out_features, dropout, name="linear3", dtype=dtype)
        self.norm = _layer_norm(dtype) if layer_norm else None
        self.output_dropout = keras.layers.Dropout(dropout, dtype=dtype)
        self.probs_dropout = keras.layers.Dropout(attn_dropout, dtype=dtype)
        self.supports_masking = True

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        self.linear1.build(input_shape)
        self.linear2.build(input_shape[:-1] + (self.proj_size,))
        self.linear3.build(input_shape[:-1] + (self.proj_size,))
        if self.norm is not None:
            self.norm.build(input_shape[:-1] + (self.proj_size,))
        self.alpha = self.add_weight(name="alpha", shape=(1,), initializer="zeros")

    def call(self, inputs, mask=None, attention_mask=None, memory=None, training=None):
        """inputs [B, L, d_in]; mask [B, L] keep-mask; attention_mask bool, True = may
        attend, broadcastable to [B, L, M + L]; memory [B, M, d_in]."""
        M = 0 if memory is None else ops.shape(memory)[1]
        z = self.linear1(inputs if memory is None else ops.concatenate([memory, inputs], axis=1))
        residual = z[:, M:]
        z = self._normalized(z)
        q = z[:, M:]
        k, v = ops.split(self.linear2(z), 2, axis=-1)
        allowed = self._allowed(mask, attention_mask, memory, ops.shape(q)[1], ops.shape(k)[1])
        return self._output(self._attend(q, k, v, allowed, training), residual, training)

    def attend_cached(self, inputs, cache, index, visible):
        """The transform of new tokens over a key/value cache (cached decoding).

        Args:
            inputs: [B, T, d_in], the tokens at positions ``index`` .. ``index + T - 1``.
            cache: ``(k, v)`` [B, N, p] each, or None: then T = N and this call's keys and
                values are the cache.
            index: int scalar (tensor), the position of the first new token.
            visible: bool [B, T, N], the cache slots each new token may attend to (its own
                earlier positions, padding and unfilled slots left out).
        Returns:
            (U [B, T, out_features], the cache with slots ``index`` .. ``index + T - 1`` set).
        """
        z = self.linear1(inputs)
        residual = z
        z = self._normalized(z)
        k, v = ops.split(self.linear2(z), 2, axis=-1)
        if cache is not None:
            k = ops.slice_update(cache[0], [0, index, 0], ops.cast(k, cache[0].dtype))
            v = ops.slice_update(cache[1], [0, index, 0], ops.cast(v, cache[1].dtype))
        allowed = ops.expand_dims(ops.cast(visible, "bool"), 1)  # shared by the heads
        if cache is None:
            return self._output(self._attend(z, k, v, allowed, False), residual, False), (k, v)
        attn = gops.over_filled_slots(
            lambda z, k, v, allowed: self._attend(z, k, v, allowed, False),
            index + ops.shape(z)[1],
            [(z, None), (k, 1), (v, 1), (allowed, -1)],
        )
        return self._output(attn, residual, False), (k, v)

    def _normalized(self, z):
        """z, layer-normalised before the attention unless the norm comes after it."""
        return self.norm(z) if self.norm is not None and not self.normalize_after else z

    def _output(self, attn, residual, training):
        """U = dropout(α·attn + residual, normalised after when so configured) W3."""
        o = ops.cast(self.alpha, attn.dtype) * attn + residual  # autocast only covers __call__
        if self.norm is not None and self.normalize_after:
            o = self.norm(o)
        return self.linear3(self.output_dropout(o, training=training))

    def _allowed(self, mask, attention_mask, memory, L, S):
        """Which keys each query may attend to, bool broadcastable to [B, H, L, S], or None:
        the key padding ``mask``, causality (all the memory, then up to the query) and
        ``attention_mask`` together."""
        allowed = None
        if mask is not None:
            allowed = _key_padding_mask(ops.cast(mask, "bool"), memory)
        if self.causal:
            offset = 0 if memory is None else ops.shape(memory)[1]
            causal = ops.arange(S)[None, :] <= ops.arange(L)[:, None] + offset
            allowed = causal[None, None] if allowed is None else ops.logical_and(allowed, causal[None, None])
        if attention_mask is not None:
            am = ops.cast(attention_mask, "bool")
            am = am[:, None] if len(am.shape) == 3 else am
            allowed = am if allowed is None else ops.logical_and(allowed, am)
        return allowed

    def _attend(self, q, k, v, allowed, training):
        """Scaled dot-product attention over heads: q [B, L, p], k/v [B, S, p], ``allowed``
        (``_allowed``) -> [B, L, p]."""
        B, L, S = ops.shape(q)[0], ops.shape(q)[1], ops.shape(k)[1]
        H, hd = self.num_heads, self.proj_size // self.num_heads
        heads = lambda t, n: ops.transpose(ops.reshape(t, (B, n, H, hd)), (0, 2, 1, 3))  # noqa: E731
        scores = ops.matmul(heads(q, L) * (hd**-0.5), ops.transpose(heads(k, S), (0, 1, 3, 2)))
        # float32 logits under mixed precision; the package's one masked softmax
        probs = self.probs_dropout(gops.masked_softmax(scores, allowed, v.dtype), training=training)
        out = ops.matmul(probs, heads(v, S))
        return ops.reshape(ops.transpose(out, (0, 2, 1, 3)), (B, L, self.proj_size))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)[:-1] + (self.out_features,)

    def get_config(self):
        return {
            **super().get_config(),
            "proj_size": self.proj_size,
            "out_features": self.out_features,
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "attn_dropout": self.attn_dropout,
            "layer_norm": self.layer_norm,
            "normalize_after": self.normalize_after,
            "causal": self.causal,
        }


@keras.saving.register_keras_serializable(package=PACKAGE)
class SRUppProjectedLinear(keras.layers.Layer):
    """The transform of layers without attention: U = dropout(LN(x W1)) W2.
    x [B, L, d_in] → U [B, L, out_features]."""

    def __init__(self, proj_size, out_features, dropout=0.0, layer_norm=True, **kwargs):
        super().__init__(**kwargs)
        self.proj_size, self.out_features = proj_size, out_features
        self.dropout, self.layer_norm = dropout, layer_norm
        dtype = self.dtype_policy
        self.linear1 = _linear(proj_size, name="linear1", dtype=dtype)
        self.linear2 = _linear(out_features, dropout, name="linear2", dtype=dtype)
        self.norm = _layer_norm(dtype) if layer_norm else None
        self.output_dropout = keras.layers.Dropout(dropout, dtype=dtype)
        self.supports_masking = True

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        self.linear1.build(input_shape)
        self.linear2.build(input_shape[:-1] + (self.proj_size,))
        if self.norm is not None:
            self.norm.build(input_shape[:-1] + (self.proj_size,))

    def call(self, inputs, mask=None, attention_mask=None, memory=None, training=None):
        """Same call signature as ``SRUppAttention``; mask, attention_mask, memory unused."""
        z = self.linear1(inputs)
        if self.norm is not None:
            z = self.norm(z)
        return self.linear2(self.output_dropout(z, training=training))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)[:-1] + (self.out_features,)

    def get_config(self):
        return {
            **super().get_config(),
            "proj_size": self.proj_size,
            "out_features": self.out_features,
            "dropout": self.dropout,
            "layer_norm": self.layer_norm,
        }


@keras.saving.register_keras_serializable(package=PACKAGE)
class SRUppCell(_SequenceLayer):
    """One SRU++ layer: transform (attention or projected linear) → U, then the
    recurrence.  x [B, L, d_in] → h [B, L, dirs·hidden_size] (and c [B, dirs·hidden_size]).

    ``dropout`` is the transform's dropout; ``hidden_dropout`` the variational
    mask on c inside h (the reference uses it on every layer but the last).
    ``layer_norm`` normalises the cell input (skip term untouched) or, with
    ``normalize_after``, its output.  ``causal`` restricts the attention to
    earlier positions (and the whole memory), as a language model needs.
    """

    def __init__(
        self,
        hidden_size,
        proj_size,
        attention=True,
        num_heads=1,
        dropout=0.0,
        attn_dropout=0.0,
        hidden_dropout=0.0,
        bidirectional=False,
        layer_norm=False,
        normalize_after=False,
        attn_layer_norm=True,
        highway_bias=-2.0,
        rescale=False,
        weight_c_init=1.0,
        causal=False,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size, self.proj_size, self.attention = hidden_size, proj_size, attention
        self.num_heads, self.dropout, self.attn_dropout = num_heads, dropout, attn_dropout
        self.hidden_dropout, self.bidirectional = hidden_dropout, bidirectional
        self.layer_norm, self.normalize_after = layer_norm, normalize_after
        self.attn_layer_norm, self.highway_bias = attn_layer_norm, highway_bias
        self.rescale, self.weight_c_init, self.causal, self.seed = rescale, weight_c_init, causal, seed
        self.output_size = hidden_size * (2 if bidirectional else 1)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        check_rank(self, input_shape)
        d_in = input_shape[-1]
        if d_in is None:
            raise ValueError(f"{self.name}: the input's last dimension must be known, got {input_shape}")
        self.k = 3 if d_in == self.output_size else 4
        out = self.output_size * self.k
        if self.attention:
            self.transform = SRUppAttention(
                self.proj_size,
                out,
                self.num_heads,
                self.dropout,
                self.attn_dropout,
                self.attn_layer_norm,
                causal=self.causal,
                name="transform",
                dtype=self.dtype_policy,
            )
        else:
            self.transform = SRUppProjectedLinear(
                self.proj_size, out, self.dropout, self.attn_layer_norm, name="transform", dtype=self.dtype_policy
            )
        self.norm = None
        if self.layer_norm:
            self.norm = _layer_norm(self.dtype_policy)
            self.norm.build(input_shape[:-1] + ((self.output_size if self.normalize_after else d_in),))
        self.transform.build(input_shape)
        limit = self.weight_c_init
        self.weight_c = self.add_weight(
            name="weight_c", shape=(2 * self.output_size,), initializer=keras.initializers.RandomUniform(-limit, limit)
        )
        bias0 = np.concatenate([np.zeros(self.output_size), np.full(self.output_size, self.highway_bias)])
        self.bias = self.add_weight(
            name="bias", shape=(2 * self.output_size,), initializer=keras.initializers.Constant(bias0)
        )

    @property
    def scale_x(self):
        """The skip-term multiplier of the reference (only used when k = 3)."""
        return math.sqrt(1.0 + 2.0 * math.exp(self.highway_bias)) if self.rescale else 1.0

    def call(
        self, inputs, mask=None, attention_mask=None, initial_state=None, memory=None, return_state=False, training=None
    ):
        """inputs [B, L, d_in]; mask [B, L] keep-mask; attention_mask bool broadcastable
        to [B, L, M + L]; initial_state [B, dirs·d]; memory [B, M, d_in] (the previous
        segment's input to this layer).  → h, or (h, c_last) with return_state."""
        x = inputs
        if self.norm is not None and not self.normalize_after:
            x = self.norm(x)
        U = self.transform(x, mask=mask, attention_mask=attention_mask, memory=memory, training=training)
        dropout_mask = None
        if training and self.hidden_dropout > 0:
            ones = ops.ones((ops.shape(inputs)[0], self.output_size), self.compute_dtype)
            dropout_mask = keras.random.dropout(ones, self.hidden_dropout, seed=self.seed_generator)
        mask_pad = None if mask is None else ops.logical_not(ops.cast(mask, "bool"))
        h, c = sru_recurrence(
            U,
            inputs,
            self.weight_c,
            self.bias,
            c0=initial_state,
            mask_pad=mask_pad,
            scale_x=self.scale_x if self.k == 3 else None,
            dropout_mask=dropout_mask,
            bidirectional=self.bidirectional,
        )
        h, c = ops.cast(h, self.compute_dtype), ops.cast(c, self.compute_dtype)
        if self.norm is not None and self.normalize_after:
            h = self.norm(h)
        return (h, c) if return_state else h

    def attend_cached(self, inputs, cache, index, visible, real):
        """New tokens over the cell's cache (cached decoding): the attention's keys and values
        by slot, and the recurrent state c after the last token so far, so each new token
        costs the same whatever its position.

        Args:
            inputs: [B, T, d_in], the tokens at positions ``index`` .. ``index + T - 1``.
            cache: ``(k, v, c)`` (attention layers) or ``(c,)``, k/v [B, N, p], c [B, d];
                None for the first pass (T = N, c from zeros).
            index: int scalar (tensor), the position of the first new token.
            visible: bool [B, T, N], the cache slots each new token may attend to.
            real: bool [B, T], which new tokens are real (the others carry the state through).
        Returns:
            (h [B, T, d], the new cache).
        """
        if self.bidirectional:
            raise ValueError(f"{self.name}: a bidirectional SRU++ cell sees later tokens and takes no cache")
        x = self.norm(inputs) if self.norm is not None and not self.normalize_after else inputs
        if self.attention:
            U, kept = self.transform.attend_cached(x, None if cache is None else cache[:2], index, visible)
        else:
            U, kept = self.transform(x, training=False), ()
        # in float32 (the recurrence's own precision under mixed precision), so that the state
        # kept between steps is not rounded to float16 where the uncached call never rounds it
        dtype = "float64" if self.compute_dtype == "float64" else "float32"
        h, c = sru_recurrence(
            ops.cast(U, dtype),
            ops.cast(inputs, dtype),
            ops.cast(self.weight_c, dtype),
            ops.cast(self.bias, dtype),
            c0=None if cache is None else cache[-1],
            mask_pad=ops.logical_not(real),
            scale_x=self.scale_x if self.k == 3 else None,
        )
        h = ops.cast(h, self.compute_dtype)
        if self.norm is not None and self.normalize_after:
            h = self.norm(h)
        return h, (*kept, c)

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "proj_size": self.proj_size,
            "attention": self.attention,
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "attn_dropout": self.attn_dropout,
            "hidden_dropout": self.hidden_dropout,
            "bidirectional": self.bidirectional,
            "layer_norm": self.layer_norm,
            "normalize_after": self.normalize_after,
            "attn_layer_norm": self.attn_layer_norm,
            "highway_bias": self.highway_bias,
            "rescale": self.rescale,
            "weight_c_init": self.weight_c_init,
            "causal": self.causal,
            "seed": self.seed,
        }


def uses_attention(index, num_layers, attention_every_n_layers=1, attention_last_n_layers=-1):
    """Whether layer ``index`` (0-based) of the stack has attention (the reference's rule)."""
    if attention_last_n_layers != -1:
        return num_layers - index <= attention_last_n_layers
    return (index + 1) % attention_every_n_layers == 0


#: the SRUppCell options every layer of a stack shares, with the reference's defaults
SHARED_CELL_OPTIONS = {
    "num_heads": 1,
    "dropout": 0.0,
    "attn_dropout": 0.0,
    "bidirectional": False,
    "layer_norm": False,
    "normalize_after": False,
    "attn_layer_norm": True,
    "highway_bias": -2.0,
    "rescale": False,
    "weight_c_init": 1.0,
}


def stacked_cell_options(index, num_layers, attention_every_n_layers=1, attention_last_n_layers=-1, **shared):
    """The ``SRUppCell`` keyword arguments of layer ``index`` of a stack of ``num_layers``.

    The reference's stacking rules, written once for the ``SRUpp`` layer and
    the SRU++ models: attention by ``uses_attention``; the variational hidden
    dropout (at the transform's dropout rate) on every layer but the last.
    ``shared``: the ``SHARED_CELL_OPTIONS`` (and e.g. ``causal``, ``hidden_size``).
    """
    unknown = sorted(set(shared) - set(SHARED_CELL_OPTIONS) - {"hidden_size", "proj_size", "causal"})
    if unknown:
        raise TypeError(f"stacked_cell_options: unknown option(s) {unknown}")
    options = {**SHARED_CELL_OPTIONS, **shared}
    options.update(
        attention=uses_attention(index, num_layers, attention_every_n_layers, attention_last_n_layers),
        hidden_dropout=options["dropout"] if index + 1 != num_layers else 0.0,
    )
    return options


@keras.saving.register_keras_serializable(package=PACKAGE)
class SRUpp(_SequenceLayer):
    """A stack of SRU++ layers on batch-major input, equal to the official
    ``sru.SRUpp`` with the same arguments (``input_size`` is taken from the input).

    Call: ``layer(x, mask=None, attention_mask=None, initial_state=None,
    memory=None, return_state=False)``; x [B, L, d_in] → h [B, L, dirs·hidden_size];
    attention_mask bool (True = may attend) broadcastable to [B, L, M + L];
    initial_state [num_layers, B, dirs·hidden_size]; memory a list (one per
    layer) of [B, M, width] previous-segment inputs of each layer, or None;
    ``return_state=True`` also returns c_last [num_layers, B, dirs·hidden_size].
    """

    def __init__(
        self,
        hidden_size,
        proj_size,
        num_layers=2,
        num_heads=1,
        dropout=0.0,
        attn_dropout=0.0,
        bidirectional=False,
        layer_norm=False,
        normalize_after=False,
        attn_layer_norm=True,
        highway_bias=-2.0,
        attention_every_n_layers=1,
        attention_last_n_layers=-1,
        rescale=False,
        weight_c_init=1.0,
        proj_input_to_hidden_first=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if attention_every_n_layers != 1 and attention_last_n_layers != -1:
            raise ValueError("SRUpp: set attention_every_n_layers or attention_last_n_layers, not both")
        self.hidden_size, self.proj_size, self.num_layers = hidden_size, proj_size, num_layers
        self.num_heads, self.dropout, self.attn_dropout = num_heads, dropout, attn_dropout
        self.bidirectional, self.layer_norm, self.normalize_after = bidirectional, layer_norm, normalize_after
        self.attn_layer_norm, self.highway_bias = attn_layer_norm, highway_bias
        self.attention_every_n_layers = attention_every_n_layers
        self.attention_last_n_layers = attention_last_n_layers
        self.rescale, self.weight_c_init = rescale, weight_c_init
        self.proj_input_to_hidden_first = proj_input_to_hidden_first
        self.output_size = hidden_size * (2 if bidirectional else 1)
        shared = {name: getattr(self, name) for name in SHARED_CELL_OPTIONS}
        self.cells = [
            SRUppCell(
                hidden_size=hidden_size,
                proj_size=proj_size,
                name=f"cell_{i}",
                dtype=self.dtype_policy,
                **stacked_cell_options(i, num_layers, attention_every_n_layers, attention_last_n_layers, **shared),
            )
            for i in range(num_layers)
        ]
        self.input_to_hidden = None
        self.supports_masking = True

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        check_rank(self, input_shape)
        width = input_shape[-1]
        if self.proj_input_to_hidden_first and width != self.output_size:
            self.input_to_hidden = _linear(self.output_size, name="input_to_hidden", dtype=self.dtype_policy)
            self.input_to_hidden.build(input_shape)
            width = self.output_size
        for cell in self.cells:
            cell.build(input_shape[:-1] + (width,))
            width = self.output_size

    def call(
        self, inputs, mask=None, attention_mask=None, initial_state=None, memory=None, return_state=False, training=None
    ):
        if memory is not None and len(memory) != self.num_layers:
            raise ValueError(
                f"{self.name}: memory must be a list of {self.num_layers} tensors (one per layer), got {len(memory)}"
            )
        x = inputs if self.input_to_hidden is None else self.input_to_hidden(inputs)
        states = []
        for i, cell in enumerate(self.cells):
            x, c = cell(
                x,
                mask=mask,
                attention_mask=attention_mask,
                initial_state=None if initial_state is None else initial_state[i],
                memory=None if memory is None else memory[i],
                return_state=True,
                training=training,
            )
            states.append(c)
        return (x, ops.stack(states)) if return_state else x

    def compute_mask(self, inputs, mask=None):
        return mask

    def load_reference_state_dict(self, state_dict):
        """Load the official PyTorch ``SRUpp.state_dict()`` (values as numpy arrays
        or anything ``np.asarray`` accepts).  The layer must be built.  torch
        ``Linear.weight`` [out, in] becomes the Keras kernel [in, out]."""
        if not self.built:
            raise ValueError(f"{self.name}: call or build the layer before load_reference_state_dict")
        state = {key: np.asarray(value) for key, value in state_dict.items()}
        used = set()

        def take(key, variable, transpose=False):
            if key not in state:
                raise KeyError(f"{self.name}.load_reference_state_dict: missing key {key!r}")
            value = state[key].T if transpose else state[key]
            if tuple(value.shape) != tuple(variable.shape):
                raise ValueError(
                    f"{self.name}.load_reference_state_dict: {key!r} has shape "
                    f"{state[key].shape}, expected {tuple(variable.shape)}"
                    f"{' (transposed)' if transpose else ''}"
                )
            variable.assign(value.astype(variable.dtype))
            used.add(key)

        if self.input_to_hidden is not None:
            take("input_to_hidden.weight", self.input_to_hidden.kernel, transpose=True)
        for i, cell in enumerate(self.cells):
            prefix = f"rnn_lst.{i}."
            take(prefix + "weight_c", cell.weight_c)
            take(prefix + "bias", cell.bias)
            if cell.norm is not None:
                take(prefix + "layer_norm.weight", cell.norm.gamma)
                take(prefix + "layer_norm.bias", cell.norm.beta)
            t = cell.transform
            names = ["linear1", "linear2"] + (["linear3"] if isinstance(t, SRUppAttention) else [])
            for name in names:
                take(f"{prefix}transform_module.{name}.weight", getattr(t, name).kernel, transpose=True)
            if isinstance(t, SRUppAttention):
                take(prefix + "transform_module.alpha", t.alpha)
            if t.norm is not None:
                take(prefix + "transform_module.layer_norm.weight", t.norm.gamma)
                take(prefix + "transform_module.layer_norm.bias", t.norm.beta)
            scale_key = prefix + "scale_x"
            if scale_key in state:  # a buffer fixed by highway_bias at construction
                used.add(scale_key)
                if cell.rescale and not np.allclose(state[scale_key], cell.scale_x, rtol=1e-6):
                    raise ValueError(
                        f"{self.name}.load_reference_state_dict: {scale_key!r} = "
                        f"{state[scale_key]} but highway_bias={cell.highway_bias} gives "
                        f"{cell.scale_x}; build the layer with the reference's highway_bias"
                    )
        unexpected = sorted(set(state) - used)
        if unexpected:
            raise ValueError(
                f"{self.name}.load_reference_state_dict: unexpected keys {unexpected} "
                f"(does the configuration match the reference module?)"
            )

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "proj_size": self.proj_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "attn_dropout": self.attn_dropout,
            "bidirectional": self.bidirectional,
            "layer_norm": self.layer_norm,
            "normalize_after": self.normalize_after,
            "attn_layer_norm": self.attn_layer_norm,
            "highway_bias": self.highway_bias,
            "attention_every_n_layers": self.attention_every_n_layers,
            "attention_last_n_layers": self.attention_last_n_layers,
            "rescale": self.rescale,
            "weight_c_init": self.weight_c_init,
            "proj_input_to_hidden_first": self.proj_input_to_hidden_first,
        }
