"""Helpers for layer tests: .keras round trips."""

import os
import tempfile

import keras
import numpy as np

from gau_keras.layers import Loss


def assert_keras_round_trip(model, inputs, atol=1e-6):
    """Saves ``model`` as .keras, reloads it and compares predictions."""
    expected = model.predict(inputs, verbose=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        restored = keras.models.load_model(path)
    got = restored.predict(inputs, verbose=0)
    for e, g in zip(keras.tree.flatten(expected), keras.tree.flatten(got)):
        np.testing.assert_allclose(g, e, atol=atol)
    return restored


def gradients(loss, weights):
    """d loss(*weights) / d weights (numpy arrays in, backend tensors out) on the backend in use."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.grad(loss, argnums=tuple(range(len(weights))))(*weights)
    import tensorflow as tf

    tensors = [tf.convert_to_tensor(w) for w in weights]
    with tf.GradientTape() as tape:  # nests: an outer tape records this gradient
        tape.watch(tensors)
        value = loss(*tensors)
    return tape.gradient(value, tensors)


@keras.saving.register_keras_serializable(package="gau_keras_tests")
class MeanLoss(Loss):
    """A concrete ``Loss`` (the registered base class is abstract): the mean of its input."""

    def compute_loss(self, inputs, mask=None):
        return keras.ops.mean(inputs)
