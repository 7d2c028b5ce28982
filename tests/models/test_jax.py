"""GAU-alpha and RoFormerV2 on Keras 3's JAX backend (issue 26, item 1).

One JAX process (KERAS_BACKEND=jax) builds the models from TF1 checkpoints,
predicts, reloads a .keras file this (TensorFlow) process saved, saves one of
its own, runs mixed_bfloat16 and fits a few steps; this process compares:

* the bundled GAU-alpha's MLM probabilities and a tiny RoFormerV2's, JAX
  against TensorFlow: <= 1e-5;
* a .keras saved under TensorFlow predicts the same under JAX, and one saved
  under JAX the same under TensorFlow: <= 1e-5;
* mixed_bfloat16 on JAX within the 3e-2 that holds on TensorFlow
  (tests/models/test_mixed_precision.py);
* fit with LAMB, no dropout: the same losses on both backends for 3 updates (1e-4
  relative: the backends' float32 round-off, amplified by the updates).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

TEXTS = ["今天天气很好。", "北京是中国的首都，也是政治和文化中心。", "物流很快，质量也不错，下次还会再来买。"]
BOUND = 1e-5
BFLOAT16 = 3e-2

#: what both backends run; `job` holds the paths, the outputs go to job["out"] (an .npz)
WORK = r"""
import json, sys
import numpy as np
import keras
from tests.models import test_jax as T
job = json.loads(sys.argv[1])
np.savez(job["out"], **T.backend_outputs(job))
"""


def _inputs(model, ids):
    return [ids, np.zeros_like(ids)][: len(model.inputs)]


def bundled_probabilities(policy="float32"):
    import keras

    from gau_keras.pretrained import load_pretrained
    from gau_keras.snippets import sequence_padding

    keras.mixed_precision.set_global_policy(policy)
    try:
        model, tokenizer = load_pretrained(None, model="gau_alpha", with_mlm=True)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    ids = sequence_padding([tokenizer.encode(text)[0] for text in TEXTS]).astype("int32")
    return np.asarray(model.predict(_inputs(model, ids), verbose=0), "float32"), ids > 0


def checkpoint_probabilities(config, checkpoint, model):
    from gau_keras.models import build_transformer_model

    network = build_transformer_model(config, checkpoint, model=model, with_mlm=True)
    ids = np.array([[2, 7, 8, 9, 10, 3, 0, 0], [2, 11, 12, 3, 13, 14, 3, 0]], "int32")
    return np.asarray(network.predict(_inputs(network, ids), verbose=0))


def keras_file_prediction(path):
    import keras

    import gau_keras  # noqa: F401 - registers the layers

    model = keras.saving.load_model(path)
    ids = np.array([[2, 7, 8, 9, 3, 0]], "int32")
    return np.asarray(model.predict(_inputs(model, ids), verbose=0))


def classifier(config, checkpoint):
    """The tiny GAU-alpha with a [CLS] classifier (2 labels) on top."""
    import keras

    from gau_keras.layers.heads import FirstToken
    from gau_keras.models import build_transformer_model

    encoder = build_transformer_model(
        config, checkpoint, model="gau_alpha", dropout_rate=0.0, attention_dropout_rate=0.0
    )  # no dropout masks to differ
    cls = FirstToken(name="CLS-token")(encoder.output)
    head = keras.layers.Dense(2, name="label")
    model = keras.Model(encoder.inputs, head(cls))
    # numpy weights: the backends' random generators differ for the same seed
    kernel = np.random.default_rng(3).normal(size=head.kernel.shape) * 0.5
    head.set_weights([kernel.astype("float32"), np.zeros(2, "float32")])
    return model


def fit_losses(config, checkpoint, steps=3):
    """Per-update losses of `classifier` under LAMB on fixed rows (no shuffling, no dropout)."""
    import keras

    from gau_keras.optimizers import LAMB

    model = classifier(config, checkpoint)
    rng = np.random.default_rng(5)
    ids = rng.integers(5, 50, (4 * steps, 8)).astype("int32")
    ids[:, 0], ids[:, -1] = 2, 3
    labels = rng.integers(0, 2, (4 * steps,))
    model.compile(LAMB(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = [model.train_on_batch(_inputs(model, ids[i : i + 4]), labels[i : i + 4]) for i in range(0, 4 * steps, 4)]
    return np.asarray(history, "float64")


def backend_outputs(job):
    """Everything one backend computes for the comparison (also saves its own .keras)."""
    import keras

    out = {}
    out["bundled"], out["keep"] = bundled_probabilities()
    out["bundled_bfloat16"], _ = bundled_probabilities("mixed_bfloat16")
    out["roformer_v2"] = checkpoint_probabilities(job["roformer_config"], job["roformer_checkpoint"], "roformer_v2")
    out["gau_alpha"] = checkpoint_probabilities(job["gau_config"], job["gau_checkpoint"], "gau_alpha")
    if job.get("load"):
        out["loaded"] = keras_file_prediction(job["load"])
    model = classifier(job["gau_config"], job["gau_checkpoint"])
    model.save(job["save"])
    out["saved"] = keras_file_prediction(job["save"])
    out["fit"] = fit_losses(job["gau_config"], job["gau_checkpoint"])
    out["backend"] = np.array(keras.backend.backend())
    return out


def _run(job, backend):
    env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", WORK, json.dumps(job)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(job["out"]))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, requires_jax):
    """(TensorFlow's outputs, JAX's outputs, the .keras JAX saved)."""
    from tests.model_utils import random_checkpoint

    root = tmp_path_factory.mktemp("jax_models")
    job = {}
    for model, key in (("roformer_v2", "roformer"), ("gau_alpha", "gau")):
        (root / model).mkdir()
        job[f"{key}_config"], job[f"{key}_checkpoint"] = random_checkpoint(
            str(root / model), model=model, vocab_size=50
        )
    tensorflow = backend_outputs(dict(job, save=str(root / "tensorflow.keras")))
    jax = _run(
        dict(job, load=str(root / "tensorflow.keras"), save=str(root / "jax.keras"), out=str(root / "jax.npz")), "jax"
    )
    assert str(jax["backend"]) == "jax"
    return tensorflow, jax, str(root / "jax.keras")


def _relative(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("key", ["bundled", "roformer_v2", "gau_alpha"])
def test_mlm_probabilities_equal_tensorflows(outputs, key):
    tensorflow, jax, _ = outputs
    keep = tensorflow["keep"] if key == "bundled" else np.ones(tensorflow[key].shape[:2], bool)
    assert tensorflow[key][keep].max() > 0.05  # not a uniform guess
    assert np.abs(jax[key] - tensorflow[key])[keep].max() <= BOUND


def test_keras_file_crosses_backends_both_ways(outputs):
    tensorflow, jax, jax_keras = outputs
    assert np.abs(jax["loaded"] - tensorflow["saved"]).max() <= BOUND  # saved by TF, loaded by JAX
    assert np.abs(keras_file_prediction(jax_keras) - jax["saved"]).max() <= BOUND  # saved by JAX, loaded by TF


def test_mixed_bfloat16_on_jax_within_the_tensorflow_bound(outputs):
    _, jax, _ = outputs
    keep = jax["keep"]
    assert np.abs(jax["bundled_bfloat16"] - jax["bundled"])[keep].max() < BFLOAT16


def test_fit_gives_the_same_losses(outputs):
    tensorflow, jax, _ = outputs
    assert np.all(np.isfinite(jax["fit"])) and len(jax["fit"]) == 3
    assert jax["fit"] == pytest.approx(tensorflow["fit"], rel=1e-4)
