"""gau_keras.initializers.Portable: Keras's distributions drawn with numpy, the same
values on every backend (this module runs in the JAX pass too)."""

import json

import keras
import numpy as np
import pytest

from gau_keras.initializers import Portable

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


def _draw(initializer, shape):
    return keras.ops.convert_to_numpy(initializer(shape, dtype="float32"))


def test_glorot_uniform_is_numpys_uniform_draw_of_keras_limit():
    """The values are a function of the seed alone, whatever the backend: numpy's uniform
    on Keras's glorot limit sqrt(6 / (fan_in + fan_out))."""
    got = _draw(Portable("glorot_uniform", seed=7), (30, 20))
    limit = np.sqrt(6.0 / 50)
    want = np.random.default_rng(7).uniform(-limit, limit, size=(30, 20)).astype("float32")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "name",
    [
        "glorot_uniform",
        "glorot_normal",
        "lecun_normal",
        "he_uniform",
        "truncated_normal",
        "random_normal",
        "random_uniform",
    ],
)
def test_distribution_matches_keras(name):
    portable = _draw(Portable(name, seed=3), (400, 300))
    native = _draw(keras.initializers.get(name), (400, 300))
    assert float(portable.std()) == pytest.approx(float(native.std()), rel=0.02)
    assert float(portable.mean()) == pytest.approx(float(native.mean()), abs=3e-3 * max(float(native.std()), 1e-3))
    if name != "random_normal":  # the others are bounded: uniform, or normal cut at 2 std
        assert np.abs(portable).max() <= np.abs(native).max() * 1.01


def test_constants_and_seeds():
    assert np.all(_draw(Portable("zeros"), (2, 3)) == 0) and np.all(_draw(Portable("ones"), (4,)) == 1)
    np.random.seed(11)
    first = Portable("glorot_uniform")
    np.random.seed(11)
    assert Portable("glorot_uniform").seed == first.seed  # drawn from numpy's seeded generator
    assert not np.array_equal(_draw(Portable(seed=1), (5, 5)), _draw(Portable(seed=2), (5, 5)))


def test_config_round_trip_and_bad_initializer():
    initializer = Portable(keras.initializers.RandomNormal(1.0, 0.5), seed=5)
    restored = keras.initializers.deserialize(json.loads(json.dumps(keras.initializers.serialize(initializer))))
    assert isinstance(restored, Portable) and restored.seed == 5
    np.testing.assert_array_equal(_draw(restored, (3, 4)), _draw(initializer, (3, 4)))
    with pytest.raises(ValueError, match="Portable: cannot draw Orthogonal with numpy"):
        Portable("orthogonal")
