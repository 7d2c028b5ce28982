"""bert4keras's ``backend`` module on Keras 3: ``from gau_keras.backend import keras, K``.

* ``keras`` is Keras 3 seen through Keras 2's names
  (``gau_keras.bert4keras.keras2``: ``keras.models.Model`` takes ``fit_generator``
  and nested lists, ``keras.losses.kullback_leibler_divergence``, ...; Keras
  itself is not changed); ``K`` is ``gau_keras.bert4keras.keras2_backend``, Keras 2's
  backend functions on ``keras.ops`` (see that module for what Keras 3 changes);
* the tensor functions bert4keras defined here (``sequence_masking``,
  ``batch_gather``, the multi-label crossentropies, ``piecewise_linear``, RoPE,
  sinusoidal embeddings, ``attention_normalize``, ...) with its names,
  signatures and results on the same inputs;
* ``search_layer`` (walks a functional model's graph), ``set_gelu`` (switches what
  the activation name 'gelu' means for gau_keras's layers built afterwards and for
  this module's ``keras.activations.get``; Keras's own table is not changed) and
  ``recompute_grad`` (bert4keras's ``RECOMPUTE=1`` decorator for a layer's ``call``,
  on ``gau_keras.layers.recompute``).

Shapes: B = batch, L = sequence length, d = feature size.
"""

import functools

import keras as keras3
import numpy as np
from keras import ops

from gau_keras import activations as gau_activations
from gau_keras import ops as gau_ops
from gau_keras.activations import gelu_erf, gelu_tanh
from gau_keras.bert4keras import keras2_backend as K
from gau_keras.bert4keras.keras2 import keras  # the Keras 2 face bert4keras scripts import from here
from gau_keras.bert4keras.keras2_backend import flatten, reshape, where  # bert4keras's extended versions
from gau_keras.losses import multilabel_categorical_crossentropy, sparse_multilabel_categorical_crossentropy
from gau_keras.registration import PACKAGE

#: bert4keras chose between keras and tf.keras with TF_KERAS; Keras 3 is what
#: tf.keras is on TensorFlow >= 2.16, so code written for tf.keras is the right branch
is_tf_keras = True

# gau_keras.layers and gau_keras.optimizers are imported where used, not here: their
# modules may import this one (as bert4keras's layers and optimizers import its backend)


def _recompute():
    from gau_keras.layers import recompute

    return recompute


def __getattr__(name):
    if name == "do_recompute":  # bert4keras's RECOMPUTE switch (``recompute_grad`` reads it when it decorates)
        return _recompute().default_recompute()
    if name == "tf":  # bert4keras's backend exposed tensorflow as `tf`; imported only when asked for
        import tensorflow

        return tensorflow
    raise AttributeError(f"module 'gau_keras.backend' has no attribute {name!r}")


def get_available_gpus():
    """Names of the visible GPUs ('/device:GPU:0', ... on TensorFlow)."""
    if K.backend() == "tensorflow":
        import tensorflow as tf

        return [device.name for device in tf.config.list_logical_devices("GPU")]
    try:
        return keras3.distribution.list_devices("gpu")
    except RuntimeError:  # JAX: "Unknown backend: 'gpu' requested" where it has none
        return []


# --------------------------------------------------------------------------- activations


@keras3.saving.register_keras_serializable(package=PACKAGE)
def swish(x):
    """x sigmoid(x)."""
    return keras3.activations.silu(x)


@keras3.saving.register_keras_serializable(package=PACKAGE)
def leaky_relu(x, alpha=0.2):
    return ops.leaky_relu(x, negative_slope=alpha)


def set_gelu(version):
    """Makes the activation name 'gelu' mean the 'erf' (exact, the default) or the 'tanh'
    GELU in gau_keras's layers built afterwards and in this module's ``keras.activations.get``.

    A layer keeps the function it was built with, and a saved model keeps it too ('tanh'
    saves as ``gau_keras>gelu_tanh``). Keras's own name table is left alone: a plain
    ``keras.layers.Dense(activation='gelu')`` is Keras's exact GELU (``gau_keras.activations``).
    """
    gau_activations.set_gelu(version)


# --------------------------------------------------------------------------- schedules and graph search


def piecewise_linear(t, schedule, from_zero=True):
    """The piecewise-linear function through the knots ``schedule`` ({step: value}) at ``t``.

    E.g. {1000: 1, 2000: 0.1}: from 0 (with ``from_zero``) up to 1 at t = 1000,
    down to 0.1 at 2000, then constant. ``t``: tensor of any shape (floatx result).
    """
    from gau_keras.optimizers import PiecewiseLinearDecay

    t = ops.cast(t, K.floatx())
    multiplier = PiecewiseLinearDecay(1.0, schedule, from_zero=from_zero).multiplier(t)
    return ops.cast(multiplier, K.floatx()) + ops.zeros_like(t)


def _operation_of(inputs):
    """The layer itself, or the layer (operation) that produced a symbolic tensor."""
    if isinstance(inputs, keras3.Operation):
        return inputs
    history = getattr(inputs, "_keras_history", None)
    if history is None:
        raise ValueError(
            "search_layer: `inputs` must be a layer or a symbolic output of a functional model "
            f"(e.g. model.output), got {type(inputs).__name__}; inside a loss or train_step tensors "
            "are concrete in Keras 3: search from the model instead (search_layer(model.output, name))"
        )
    return history.operation


def _parents(operation):
    """The operations feeding the first call of ``operation``."""
    if not operation._inbound_nodes:
        return []
    return [node.operation for node in operation._inbound_nodes[0].parent_nodes]


def search_layer(inputs, name, exclude_from=None):
    """The layer called ``name`` upstream of ``inputs`` (a layer, or a symbolic
    output of a functional model), searched depth-first; None if there is none.

    A model met on the way is also searched among its own layers;
    ``exclude_from`` (a set) collects the layers already searched.
    """
    searched = set() if exclude_from is None else exclude_from
    pending = [_operation_of(inputs)]
    while pending:
        operation = pending.pop()
        if operation.name == name:
            return operation
        if operation in searched:
            continue
        searched.add(operation)
        if isinstance(operation, keras3.Model):
            own = [layer for layer in operation.layers if layer.name == name]
            if own:
                return own[0]
        pending.extend(reversed(_parents(operation)))  # the first input is searched first
    return None


# --------------------------------------------------------------------------- masking and gathering


def align(tensor, axes, ndim=None):
    """Inserts singleton axes so that axis i of ``tensor`` becomes axis
    ``axes[i]`` of a rank-``ndim`` tensor (default ``max(axes) + 1``)."""
    if len(axes) != K.ndim(tensor):
        raise ValueError(f"align: `axes` {list(axes)} must have one entry per axis of the rank-{K.ndim(tensor)} tensor")
    if ndim is None:
        if min(axes) < 0:
            raise ValueError(f"align: negative `axes` {list(axes)} need `ndim`")
        ndim = max(axes) + 1
    normal = [a % ndim for a in axes]
    if normal != sorted(normal):
        raise ValueError(f"align: `axes` {list(axes)} must be increasing (align inserts axes, it does not transpose)")
    return gau_ops.align(tensor, normal, ndim)


def dtype(x):
    """``K.dtype(x)``, or None for a value without a dtype (a Python number)."""
    try:
        return K.dtype(x)
    except (AttributeError, TypeError, ValueError):
        return None


def _fill_value(value):
    # '-inf' / 'inf' mean a large finite value, as in bert4keras's later versions
    # (0.11.5 documents the strings but fails on them)
    if isinstance(value, str):
        if value not in ("-inf", "inf"):
            raise ValueError(f"sequence_masking: `value` string must be '-inf' or 'inf', got {value!r}")
        return gau_ops.NEG_INF if value == "-inf" else -gau_ops.NEG_INF
    return value


def sequence_masking(x, mask=None, value=0, axis=None, bias=None, return_mask=False):
    """Sets the masked positions of ``x`` to ``value``.

    Args:
        x: tensor [B, ..., L, ...].
        mask: [B, L] (bool or 0/1: 1 = keep), applied on every axis of ``axis``.
        value: the fill value; '-inf' / 'inf' mean -1e12 / 1e12.
        axis: the axis (or list of axes) of ``x`` that is the sequence; default 1.
        bias: broadcastable to ``x``: bool = an extra mask (and-ed with ``mask``),
            float = added to ``x`` where it is kept.
        return_mask: also return the mask as applied (aligned to ``x``), or None.
    """
    value = _fill_value(value)
    bool_bias = bias is not None and dtype(bias) == "bool"
    keep = bias if bool_bias else None
    if mask is not None:
        rank = K.ndim(x)
        axes = axis if isinstance(axis, (list, tuple)) else [1 if axis is None else axis]
        gau_ops.check_mask(mask, x, [a % rank for a in axes], "sequence_masking")
        per_axis = [gau_ops.align(ops.cast(mask, "bool"), [0, a % rank], rank) for a in axes]
        keep = functools.reduce(ops.logical_and, per_axis + ([] if keep is None else [keep]))
    if bias is not None and not bool_bias:
        x = x + bias
    if keep is not None:
        x = gau_ops.masked_fill(x, keep, value)
    return (x, keep) if return_mask else x


def batch_gather(params, indices):
    """``params[b..., indices[b..., j]]``: params [b..., N, ...], indices [b..., M]
    (int; the leading ``ndim(indices) - 1`` axes are batch axes) -> [b..., M, ...]."""
    if not K.dtype(indices).startswith(("int", "uint")):
        values = gau_ops.concrete(indices)
        if values is not None and (values != np.round(values)).any():
            raise ValueError(
                f"batch_gather: indices must be whole numbers, got {K.dtype(indices)} values such as "
                f"{float(values[values != np.round(values)].flat[0])!r}"
            )
        indices = ops.cast(indices, "int32")  # whole floats, or traced ones (cast as bert4keras casts)
    batch_axes = K.ndim(indices) - 1
    extra = K.ndim(params) - batch_axes - 1
    if extra < 0:
        raise ValueError(
            f"batch_gather: `params` of rank {K.ndim(params)} has too few axes for `indices` of rank {K.ndim(indices)}"
        )
    expanded = ops.reshape(indices, list(K._dims(indices)) + [1] * extra)
    target = list(K._dims(indices)) + K._dims(params)[batch_axes + 1 :]
    return ops.take_along_axis(params, ops.broadcast_to(expanded, target), axis=batch_axes)


def pool1d(x, pool_size, strides=1, padding="valid", data_format=None, pool_mode="max"):
    """Pooling along the sequence: [B, L, d] -> [B, L', d] ('max' or 'avg')."""
    x = K.expand_dims(x, 1)
    x = K.pool2d(
        x, pool_size=(1, pool_size), strides=(1, strides), padding=padding, data_format=data_format, pool_mode=pool_mode
    )
    return x[:, 0]


def divisible_temporal_padding(x, n):
    """Right-pads [B, L, d] with zeros to a length divisible by ``n``."""
    length = ops.shape(x)[1]
    return K.temporal_padding(x, (0, (n - length % n) % n))


def root_mean_square(x, axis=None, keepdims=False):
    """sqrt(mean(x^2)) over ``axis``."""
    return K.sqrt(ops.mean(ops.square(x), axis=axis, keepdims=keepdims))


# --------------------------------------------------------------------------- attention and positions


def attention_normalize(a, mask=None, axis=-1, method="softmax", bias=None):
    """Attention logits ``a`` to weights over ``axis``: 'softmax', 'squared_relu'
    (relu(a)^2 / n) or 'softmax_plus' (softmax(a ln(max(n, 16)) / ln 512)), n =
    the keys visible. ``mask`` [B, L] and ``bias`` as in ``sequence_masking``.
    """
    rank = K.ndim(a)
    axis %= rank
    if axis == rank - 1:
        return gau_ops.attention_normalize(a, mask=mask, method=method, bias=bias, min_len=16)
    if bias is not None:
        bias = ops.moveaxis(ops.broadcast_to(bias, ops.shape(a)), axis, -1)
    moved = gau_ops.attention_normalize(ops.moveaxis(a, axis, -1), mask=mask, method=method, bias=bias, min_len=16)
    return ops.moveaxis(moved, -1, axis)


def sinusoidal_embeddings(pos, dim, base=10000):
    """Sinusoidal encodings of positions ``pos`` [...] -> [..., dim], interleaved
    [sin θ0, cos θ0, sin θ1, ...] with θ_i = pos · base^(-2i/dim)."""
    return ops.cast(gau_ops.sinusoidal_embeddings(pos, dim, base=float(base)), K.floatx())


@keras3.saving.register_keras_serializable(package=PACKAGE)
class Sinusoidal(keras3.initializers.Initializer):
    """Initialiser of a [size, dim] position table with the sinusoidal encodings of 0..size-1."""

    def __call__(self, shape, dtype=None):
        size, dim = shape
        table = gau_ops.sinusoidal_embeddings(ops.arange(size, dtype="float32"), dim)
        return ops.cast(table, dtype or K.floatx())


def apply_rotary_position_embeddings(sinusoidal, *tensors):
    """RoPE: rotates each tensor [B, L, ..., d] by the positions' ``sinusoidal``
    [B or 1, L, d] (interleaved layout, as ``sinusoidal_embeddings``).

    Returns one tensor for one input, else a list.
    """
    if not tensors:
        raise ValueError("apply_rotary_position_embeddings: give at least one tensor")
    shapes = [K.int_shape(t) for t in tensors]
    if any(s != shapes[0] for s in shapes[1:]):
        raise ValueError(f"apply_rotary_position_embeddings: tensors must have the same shape, got {shapes}")
    rank = K.ndim(tensors[0])
    if rank != 4:  # gau_ops.apply_rotary inserts the head axis of a rank-4 tensor itself
        sinusoidal = gau_ops.align(sinusoidal, [0, 1, rank - 1], rank)
    outputs = [gau_ops.apply_rotary(sinusoidal, t) for t in tensors]
    return outputs[0] if len(outputs) == 1 else outputs


# --------------------------------------------------------------------------- losses
# multilabel_categorical_crossentropy and its sparse form: gau_keras.losses (imported above)


# --------------------------------------------------------------------------- recompute


def symbolic(f):
    """Identity decorator (bert4keras kept it for old Keras versions)."""
    return f


def recompute_grad(call):
    """Decorator of a layer's ``call``: with ``RECOMPUTE=1`` in the environment
    when it decorates, the call keeps only its inputs for the backward pass and
    runs again there (``gau_keras.layers.recompute``: the same dropout masks, so
    the same gradients). It applies to training calls; others run as they are.
    Without ``RECOMPUTE`` it returns ``call`` unchanged.
    """
    recompute = _recompute()
    if not recompute.default_recompute():
        return call

    @functools.wraps(call)  # keeps call's signature, which Keras reads to pass `training` / `mask`
    def inner(self, inputs, **kwargs):
        training = kwargs.get("training")
        if training is None:
            training = K._call_context_training()
        if isinstance(training, (bool, int, np.bool_)) and not training:
            return call(self, inputs, **kwargs)
        flat = keras3.tree.flatten(inputs)

        def forward(*tensors):
            return call(self, keras3.tree.pack_sequence_as(inputs, list(tensors)), **kwargs)

        return recompute.recompute_call(self, forward, flat)

    return inner


#: bert4keras's custom objects (also put into Keras's, as it did)
custom_objects = {
    "gelu_erf": gelu_erf,
    "gelu_tanh": gelu_tanh,
    "gelu": gelu_erf,
    "root_mean_square": root_mean_square,
    "swish": swish,
    "leaky_relu": leaky_relu,
    "Sinusoidal": Sinusoidal,
    "multilabel_categorical_crossentropy": multilabel_categorical_crossentropy,
    "initializer": keras3.initializers.GlorotUniform,
}
keras3.saving.get_custom_objects().update(custom_objects)

__all__ = [
    "K",
    "keras",
    "is_tf_keras",
    "get_available_gpus",
    "gelu_erf",
    "gelu_tanh",
    "set_gelu",
    "piecewise_linear",
    "search_layer",
    "align",
    "reshape",
    "flatten",
    "dtype",
    "where",
    "sequence_masking",
    "batch_gather",
    "pool1d",
    "divisible_temporal_padding",
    "root_mean_square",
    "swish",
    "leaky_relu",
    "attention_normalize",
    "sinusoidal_embeddings",
    "Sinusoidal",
    "apply_rotary_position_embeddings",
    "multilabel_categorical_crossentropy",
    "sparse_multilabel_categorical_crossentropy",
    "symbolic",
    "recompute_grad",
    "custom_objects",
]
