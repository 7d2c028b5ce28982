"""Helpers for layer tests: .keras round trips."""
import os
import tempfile

import keras
import numpy as np


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
