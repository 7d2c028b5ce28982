"""Fine-tuning under KERAS_BACKEND=jax (issue 26, item 4): ``--devices 2`` uses
``keras.distribution.DataParallel`` over 2 host devices and gives the
1-device run's losses and dev metric; the best .keras it writes loads here,
on TensorFlow."""
import importlib.util
import os

import numpy as np
import pytest

from tests.test_finetune_runner import tnews_on_one_and_two_devices


def test_two_jax_devices_give_the_one_device_run(tmp_path, shared_data):
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (pip install jax): the JAX backend cannot run here")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    records = tnews_on_one_and_two_devices(shared_data, tmp_path, env=env)
    one, two = records[1], records[2]
    assert (one["replicas"], two["replicas"]) == (1, 2) and one["xla"] and two["xla"]
    assert [e["accuracy"] for e in two["epochs"]] == [e["accuracy"] for e in one["epochs"]]
    losses = [e["train_loss"] for e in one["epochs"]]
    assert losses[1] < losses[0]                                          # it trained
    assert [e["train_loss"] for e in two["epochs"]] == pytest.approx(losses, rel=1e-5)

    import keras

    import gau_keras  # noqa: F401 - registers the layers

    model = keras.saving.load_model(two["model"])                          # saved on JAX, loaded on TensorFlow
    ids = np.array([[2, 7, 8, 9, 3, 0]], "int32")
    assert model.predict([ids, np.zeros_like(ids)], verbose=0).shape == (1, 15)
