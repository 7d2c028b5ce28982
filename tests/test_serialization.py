"""``import gau_keras`` alone registers every serialisable class: .keras files of
our models load in a fresh process that imports nothing else (safe_mode on)."""
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from gau_keras import build_transformer_model, losses
from gau_keras.layers import heads
from tests.conftest import REPO_ROOT
from tests.model_utils import TINY

LOAD = """
import json, sys
import numpy as np
import gau_keras, keras
model = keras.saving.load_model(sys.argv[1], safe_mode=True)
inputs = [np.load(path) for path in json.loads(sys.argv[2])]
np.save(sys.argv[3], np.asarray(keras.tree.flatten(model.predict(inputs, verbose=0))[0]))
"""


def _models():
    yield "gau_alpha_mlm", build_transformer_model(model="gau_alpha", with_mlm=True, **TINY["gau_alpha"])
    yield "roformer_v2_lm", build_transformer_model(model="roformer_v2", application="lm", **TINY["roformer_v2"])
    yield "srupp_mlm", build_transformer_model(model="srupp", with_mlm=True, vocab_size=60, hidden_size=16,
                                               num_hidden_layers=2, proj_size=8)
    encoder = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    yield "classifier", keras.Model(encoder.inputs, heads.classification_head(encoder.output, 3, 0.0))
    encoder = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    pointer = heads.global_pointer_head(encoder.output, encoder.inputs[0], 2, 4)
    model = keras.Model(encoder.inputs, pointer)
    model.compile(optimizer="adam", loss=losses.global_pointer_crossentropy)
    yield "global_pointer", model


@pytest.mark.parametrize("name, model", list(_models()), ids=lambda x: x if isinstance(x, str) else "")
def test_keras_file_loads_after_import_gau_keras_only(tmp_path, rng, name, model):
    ids = rng.integers(1, 60, size=(2, 9)).astype("int32")
    ids[1, 6:] = 0
    inputs = [ids] + ([np.zeros_like(ids)] if len(model.inputs) > 1 else [])
    expected = np.asarray(keras.tree.flatten(model.predict(inputs, verbose=0))[0])
    path = tmp_path / f"{name}.keras"
    model.save(path)
    paths = []
    for i, array in enumerate(inputs):
        paths.append(str(tmp_path / f"input{i}.npy"))
        np.save(paths[-1], array)
    out = tmp_path / "out.npy"
    env = {k: v for k, v in os.environ.items() if k != "GAU_KERAS_TF_FREE"}
    result = subprocess.run([sys.executable, "-c", LOAD, str(path), json.dumps(paths), str(out)],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(out), expected, atol=1e-5)
