"""The depth-scaled truncated-normal initializer of RoFormerV2 / GAU-alpha.

Design notes: docs/models.md (Initialisation).
"""
import keras


@keras.saving.register_keras_serializable(package="gau_keras")
class ScaledTruncatedNormal(keras.initializers.Initializer):
    """Truncated normal (cut at 2 std) with

        stddev = 1.13684723 / sqrt(fan) * num_layers ** (-1 / order)

    where fan = shape[1] if shape[0] > 10000 or shape[0] < 10 else shape[0]
    (so embeddings use their width). 1.13684723 undoes the variance lost by
    truncating at 2 std; the depth factor is what lets GAU-alpha (order 3) and
    RoFormerV2 (order 2) train without warm-up.
    """

    def __init__(self, num_layers, order=2, gain=1.0, seed=None):
        self.num_layers = num_layers
        self.order = order
        self.gain = gain
        self.seed = seed
        self._seed_generator = keras.random.SeedGenerator(seed) if seed is not None else None

    def stddev(self, shape):
        fan = shape[1] if (shape[0] > 10000 or shape[0] < 10) and len(shape) > 1 else shape[0]
        gain = self.gain * self.num_layers ** (-1.0 / self.order)
        return 1.13684723 / fan ** 0.5 * gain

    def __call__(self, shape, dtype=None):
        return keras.random.truncated_normal(shape, stddev=self.stddev(shape), dtype=dtype,
                                             seed=self._seed_generator)

    def get_config(self):
        return {"num_layers": self.num_layers, "order": self.order, "gain": self.gain, "seed": self.seed}
