"""Position-wise feed-forward layer (RoFormerV2's FFN)."""

import keras

from gau_keras import activations as gau_activations
from gau_keras.layers.recompute import recompute_call
from gau_keras.registration import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class FeedForward(keras.layers.Layer):
    """``o_dense(act(x W_i0) * x W_i1 * ...)``: x [B, L, H] -> [B, L, H].

    ``activation`` is one name (the plain FFN) or a list (GLU variants: one
    input projection per activation, multiplied together), as in bert4keras.
    """

    def __init__(
        self, units, activation="relu", use_bias=True, kernel_initializer="glorot_uniform", recompute=False, **kwargs
    ):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.recompute = bool(recompute)
        self.units = units
        activations = activation if isinstance(activation, (list, tuple)) else [activation]
        self.activation = [gau_activations.get(a) for a in activations]  # 'gelu' as set_gelu chose
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        self.input_dense = []
        for i, activation in enumerate(self.activation):
            dense = keras.layers.Dense(
                self.units,
                activation=activation,
                use_bias=self.use_bias,
                kernel_initializer=self.kernel_initializer,
                name=f"i{i}_dense",
            )
            dense.build(input_shape)
            setattr(self, f"i{i}_dense", dense)
            self.input_dense.append(dense)
        self.o_dense = keras.layers.Dense(
            input_shape[-1], use_bias=self.use_bias, kernel_initializer=self.kernel_initializer, name="o_dense"
        )
        self.o_dense.build(tuple(input_shape[:-1]) + (self.units,))

    def call(self, inputs, training=None):
        if self.recompute and training:
            return recompute_call(self, self.feed_forward, [inputs])
        return self.feed_forward(inputs)

    def feed_forward(self, inputs):
        x = self.input_dense[0](inputs)
        for dense in self.input_dense[1:]:
            x = x * dense(inputs)
        return self.o_dense(x)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        activation = [keras.activations.serialize(a) for a in self.activation]
        config.update(
            units=self.units,
            activation=activation[0] if len(activation) == 1 else activation,
            use_bias=self.use_bias,
            recompute=self.recompute,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
        )
        return config
