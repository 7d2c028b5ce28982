"""Normalisation layers: ScaleOffset and bert4keras's LayerNormalization.

Design notes: docs/models.md (The norm).
"""
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="gau_keras")
class ScaleOffset(keras.layers.Layer):
    """Elementwise ``x * gamma + beta`` over the last axis (GAU's q/k heads).

    Input/output: [..., d]; gamma and beta have shape [d].
    """

    def __init__(self, scale=True, offset=True, gamma_initializer="ones",
                 beta_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.scale = scale
        self.offset = offset
        self.gamma_initializer = keras.initializers.get(gamma_initializer)
        self.beta_initializer = keras.initializers.get(beta_initializer)

    def build(self, input_shape):
        dim = input_shape[-1]
        if self.scale:
            self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer=self.gamma_initializer)
        if self.offset:
            self.beta = self.add_weight(name="beta", shape=(dim,), initializer=self.beta_initializer)

    def call(self, inputs):
        x = inputs
        if self.scale:
            x = x * ops.cast(self.gamma, x.dtype)
        if self.offset:
            x = x + ops.cast(self.beta, x.dtype)
        return x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            scale=self.scale, offset=self.offset,
            gamma_initializer=keras.initializers.serialize(self.gamma_initializer),
            beta_initializer=keras.initializers.serialize(self.beta_initializer),
        )
        return config


@keras.saving.register_keras_serializable(package="gau_keras")
class LayerNormalization(ScaleOffset):
    """bert4keras's configurable layer norm over the last axis.

    ``zero_mean`` subtracts the mean, ``unit_variance`` divides by
    sqrt(mean(x**2) + epsilon), then ``scale`` (gamma) and ``offset`` (beta).
    GAU-alpha / RoFormerV2 use ``zero_mean=False, scale=False, offset=False``:
    the parameter-free RMS norm ``x / sqrt(mean(x**2, -1) + eps)``, eps
    defaulting to Keras's epsilon (1e-7) as in bert4keras.

    Input/output: [..., d].
    """

    def __init__(self, zero_mean=True, unit_variance=True, scale=True, offset=True,
                 epsilon=None, **kwargs):
        super().__init__(scale=scale, offset=offset, **kwargs)
        self.zero_mean = zero_mean
        self.unit_variance = unit_variance
        self.epsilon = float(epsilon) if epsilon is not None else keras.config.epsilon()

    def call(self, inputs):
        # float32 statistics under mixed precision, as Keras's own norms: the
        # squares of post-norm residual sums (|x| > 256) overflow float16
        x = ops.cast(inputs, "float32")
        if self.zero_mean:
            x = x - ops.mean(x, axis=-1, keepdims=True)
        if self.unit_variance:
            variance = ops.mean(ops.square(x), axis=-1, keepdims=True)
            x = x / ops.sqrt(variance + self.epsilon)
        return super().call(ops.cast(x, self.compute_dtype))

    def get_config(self):
        config = super().get_config()
        config.update(zero_mean=self.zero_mean, unit_variance=self.unit_variance, epsilon=self.epsilon)
        return config
