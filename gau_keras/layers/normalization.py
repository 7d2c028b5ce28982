"""Normalisation layers: ScaleOffset and bert4keras's LayerNormalization.

Design notes: docs/models.md (The norm).
"""

import keras
from keras import ops

from gau_keras import activations as gau_activations
from gau_keras import ops as gops
from gau_keras.registration import PACKAGE


def _is_on(flag):
    """bert4keras's scale/offset flags: True = a learned weight, a number = that
    constant, False/None = off."""
    return flag is not False and flag is not None


@keras.saving.register_keras_serializable(package=PACKAGE)
class ScaleOffset(keras.layers.Layer):
    """Elementwise ``x * gamma + beta`` over the last axis (GAU's q/k heads).

    Input/output: [..., d]; gamma and beta have shape [d]. ``scale`` /
    ``offset``: True learns gamma / beta, a number uses that constant instead,
    False or None leaves the step out.

    ``conditional=True`` (bert4keras's conditional layer norm): the input is
    ``[x, cond]`` with cond [B, c] or [B, L, c]; gamma and beta become
    ``gamma + cond' W_gamma`` and ``beta + cond' W_beta`` (``gamma_dense`` /
    ``beta_dense``, zero-initialised, no bias), where ``cond'`` is cond, or
    ``hidden_dense(cond)`` (``hidden_units`` wide, ``hidden_activation``,
    ``hidden_initializer``) when ``hidden_units`` is set. A 2-D cond applies
    to every position. The output mask is that of x.
    """

    def __init__(
        self,
        scale=True,
        offset=True,
        conditional=False,
        hidden_units=None,
        hidden_activation="linear",
        hidden_initializer="glorot_uniform",
        gamma_initializer="ones",
        beta_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.scale = scale
        self.offset = offset
        self.conditional = bool(conditional)
        self.hidden_units = hidden_units
        self.hidden_activation = gau_activations.get(hidden_activation)
        self.hidden_initializer = keras.initializers.get(hidden_initializer)
        self.gamma_initializer = keras.initializers.get(gamma_initializer)
        self.beta_initializer = keras.initializers.get(beta_initializer)

    def _split(self, inputs):
        if not self.conditional:
            return inputs, None
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise ValueError(f"{type(self).__name__} {self.name!r}: conditional=True takes inputs [x, cond]")
        return inputs

    def build(self, input_shape):
        if self.conditional and not isinstance(input_shape[0], (list, tuple)):
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: conditional=True takes inputs [x, cond], "
                f"got one input of shape {tuple(input_shape)}"
            )
        shape = input_shape[0] if self.conditional else input_shape
        dim = shape[-1]
        if self.scale is True:
            self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer=self.gamma_initializer)
        if self.offset is True:
            self.beta = self.add_weight(name="beta", shape=(dim,), initializer=self.beta_initializer)
        if not self.conditional:
            return
        cond_shape = tuple(input_shape[1])

        def dense(units, name, **options):
            layer = keras.layers.Dense(units, use_bias=False, name=name, dtype=self.dtype_policy, **options)
            layer.build(cond_shape)
            return layer

        if self.hidden_units is not None:
            self.hidden_dense = dense(
                self.hidden_units,
                "hidden_dense",
                activation=self.hidden_activation,
                kernel_initializer=self.hidden_initializer,
            )
            cond_shape = cond_shape[:-1] + (self.hidden_units,)
        if _is_on(self.scale):
            self.gamma_dense = dense(dim, "gamma_dense", kernel_initializer="zeros")
        if _is_on(self.offset):
            self.beta_dense = dense(dim, "beta_dense", kernel_initializer="zeros")

    def _condition(self, cond, rank):
        """cond [B, c'] or [B, L, c'] aligned to a rank-``rank`` input."""
        if self.hidden_units is not None:
            cond = self.hidden_dense(cond)
        while len(cond.shape) < rank:
            cond = ops.expand_dims(cond, 1)
        return cond

    def affine(self, x, cond=None):
        """``x * gamma + beta`` with the (conditional) parameters, in x's dtype."""
        if cond is not None:
            cond = self._condition(cond, len(x.shape))
        if _is_on(self.scale):
            gamma = ops.cast(self.gamma if self.scale is True else self.scale, x.dtype)
            if cond is not None:
                gamma = gamma + ops.cast(self.gamma_dense(cond), x.dtype)
            x = x * gamma
        if _is_on(self.offset):
            beta = ops.cast(self.beta if self.offset is True else self.offset, x.dtype)
            if cond is not None:
                beta = beta + ops.cast(self.beta_dense(cond), x.dtype)
            x = x + beta
        return x

    def call(self, inputs):
        x, cond = self._split(inputs)
        return self.affine(x, cond)

    def compute_mask(self, inputs, mask=None):
        if self.conditional and mask is not None:
            return mask[0]
        return mask

    def compute_output_shape(self, input_shape):
        return input_shape[0] if self.conditional else input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            scale=self.scale,
            offset=self.offset,
            conditional=self.conditional,
            hidden_units=self.hidden_units,
            hidden_activation=keras.activations.serialize(self.hidden_activation),
            hidden_initializer=keras.initializers.serialize(self.hidden_initializer),
            gamma_initializer=keras.initializers.serialize(self.gamma_initializer),
            beta_initializer=keras.initializers.serialize(self.beta_initializer),
        )
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerNormalization(ScaleOffset):
    """bert4keras's configurable (conditional) layer norm over the last axis.

    ``zero_mean`` subtracts the mean, ``unit_variance`` divides by
    sqrt(mean(x**2) + epsilon), then ``scale`` (gamma) and ``offset`` (beta),
    conditional on a second input with ``conditional=True`` (see ScaleOffset).
    GAU-alpha / RoFormerV2 use ``zero_mean=False, scale=False, offset=False``:
    the parameter-free RMS norm ``x / sqrt(mean(x**2, -1) + eps)``, eps
    defaulting to Keras's epsilon (1e-7) as in bert4keras.

    Input/output: [..., d] (or ``[x, cond]`` -> x's shape).
    """

    def __init__(self, zero_mean=True, unit_variance=True, epsilon=None, **kwargs):
        super().__init__(**kwargs)
        self.zero_mean = zero_mean
        self.unit_variance = unit_variance
        self.epsilon = float(epsilon) if epsilon else keras.config.epsilon()

    def call(self, inputs):
        x, cond = self._split(inputs)
        if not self.zero_mean:
            return self.affine(self._rms(x) if self.unit_variance else x, cond)
        # float32 statistics under mixed precision, as Keras's own norms: the
        # squares of post-norm residual sums (|x| > 256) overflow float16
        x = ops.cast(x, "float32")
        x = x - ops.mean(x, axis=-1, keepdims=True)
        if self.unit_variance:
            variance = ops.mean(ops.square(x), axis=-1, keepdims=True)
            x = x / ops.sqrt(variance + self.epsilon)
        return self.affine(ops.cast(x, self.compute_dtype), cond)

    def _rms(self, x):
        return gops.rms_normalize(ops.cast(x, self.compute_dtype), self.epsilon)

    def get_config(self):
        config = super().get_config()
        config.update(zero_mean=self.zero_mean, unit_variance=self.unit_variance, epsilon=self.epsilon)
        return config
