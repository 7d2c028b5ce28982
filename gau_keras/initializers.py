"""Initializers: the depth-scaled truncated normal of RoFormerV2 / GAU-alpha,
and `Portable`, a Keras initializer's distribution drawn the same on every
backend.

Design notes: docs/models.md (Initialisation).
"""

import keras
import numpy as np
from keras.src.initializers.random_initializers import compute_fans  # Keras's fan rule; not in its public API

from gau_keras.ops import sinusoidal_embeddings
from gau_keras.registration import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
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
        return 1.13684723 / fan**0.5 * gain

    def __call__(self, shape, dtype=None):
        return keras.random.truncated_normal(shape, stddev=self.stddev(shape), dtype=dtype, seed=self._seed_generator)

    def get_config(self):
        return {"num_layers": self.num_layers, "order": self.order, "gain": self.gain, "seed": self.seed}


#: the truncated normals of Keras cut at 2 standard deviations; this undoes the variance they lose
TRUNCATED_STDDEV = 0.87962566103423978


def _truncated_normal(rng, shape, stddev):
    values = rng.normal(0.0, stddev, size=shape)
    outside = np.abs(values) > 2 * stddev
    while outside.any():
        values[outside] = rng.normal(0.0, stddev, size=int(outside.sum()))
        outside = np.abs(values) > 2 * stddev
    return values


@keras.saving.register_keras_serializable(package=PACKAGE)
class Portable(keras.initializers.Initializer):
    """``initializer``'s distribution, drawn with numpy from ``seed``: the same
    values on TensorFlow and JAX (Keras's initializers draw with the backend's
    generator, which gives other numbers for one seed), so that a run with one
    seed starts from the same weights on either backend.

    Args:
        initializer: a Keras initializer (name, config or object) of the
            VarianceScaling family (glorot_*, he_*, lecun_*), RandomNormal,
            RandomUniform, TruncatedNormal, or a constant one (zeros, ones,
            Constant, which need no drawing).
        seed: an int; None draws one from numpy's global generator, which
            ``keras.utils.set_random_seed`` seeds (then it is fixed and saved
            in the config).
    """

    DRAWN = (
        keras.initializers.VarianceScaling,
        keras.initializers.RandomNormal,
        keras.initializers.RandomUniform,
        keras.initializers.TruncatedNormal,
    )
    CONSTANT = (keras.initializers.Zeros, keras.initializers.Ones, keras.initializers.Constant)

    def __init__(self, initializer="glorot_uniform", seed=None):
        self.initializer = keras.initializers.get(initializer)
        if not isinstance(self.initializer, self.DRAWN + self.CONSTANT):
            raise ValueError(
                f"Portable: cannot draw {type(self.initializer).__name__} with numpy; expected one of "
                f"{[c.__name__ for c in self.DRAWN + self.CONSTANT]}"
            )
        self.seed = int(np.random.randint(2**31 - 1)) if seed is None else int(seed)

    def __call__(self, shape, dtype=None):
        base = self.initializer
        if isinstance(base, self.CONSTANT):
            return base(shape, dtype=dtype)
        shape = tuple(int(d) for d in shape)
        rng = np.random.default_rng(self.seed)
        if isinstance(base, keras.initializers.VarianceScaling):
            fan_in, fan_out = compute_fans(shape)
            fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[base.mode]
            scale = base.scale / max(1.0, fan)
            if base.distribution == "uniform":
                limit = np.sqrt(3.0 * scale)
                values = rng.uniform(-limit, limit, size=shape)
            elif base.distribution == "truncated_normal":
                values = _truncated_normal(rng, shape, np.sqrt(scale) / TRUNCATED_STDDEV)
            else:
                values = rng.normal(0.0, np.sqrt(scale), size=shape)
        elif isinstance(base, keras.initializers.TruncatedNormal):
            values = base.mean + _truncated_normal(rng, shape, base.stddev)
        elif isinstance(base, keras.initializers.RandomNormal):
            values = rng.normal(base.mean, base.stddev, size=shape)
        else:
            values = rng.uniform(base.minval, base.maxval, size=shape)
        return keras.ops.convert_to_tensor(values, dtype=dtype or keras.backend.floatx())

    def get_config(self):
        return {"initializer": keras.initializers.serialize(self.initializer), "seed": self.seed}


@keras.saving.register_keras_serializable(package=PACKAGE)
class Sinusoidal(keras.initializers.Initializer):
    """The [rows, dim] table of interleaved sinusoidal embeddings of positions
    0..rows-1 (bert4keras's ``'Sinusoidal'``; NEZHA's fixed relative-position
    table). ``dim`` must be even."""

    def __call__(self, shape, dtype=None):
        rows, dim = shape
        table = sinusoidal_embeddings(keras.ops.arange(rows, dtype="float32"), dim)
        return keras.ops.cast(table, dtype or keras.backend.floatx())

    def get_config(self):
        return {}
