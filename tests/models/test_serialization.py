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
import json, sys, traceback
import numpy as np
import gau_keras, keras
results = {}
for job in json.loads(sys.argv[1]):
    try:
        model = keras.saving.load_model(job["path"], safe_mode=True)
        inputs = [np.load(path) for path in job["inputs"]]
        np.save(job["out"], np.asarray(keras.tree.flatten(model.predict(inputs, verbose=0))[0]))
        results[job["name"]] = None
    except Exception:
        results[job["name"]] = traceback.format_exc()[-3000:]
json.dump(results, open(sys.argv[2], "w"))
"""


def _build(name):
    if name == "gau_alpha_mlm":
        return build_transformer_model(model="gau_alpha", with_mlm=True, **TINY["gau_alpha"])
    if name == "roformer_v2_lm":
        return build_transformer_model(model="roformer_v2", application="lm", **TINY["roformer_v2"])
    if name == "srupp_mlm":
        return build_transformer_model(model="srupp", with_mlm=True, vocab_size=60, hidden_size=16,
                                       num_hidden_layers=2, proj_size=8)
    if name in BERT_FAMILY:
        model, options = BERT_FAMILY[name]
        return build_transformer_model(model=model, **options, **TINY[model])
    encoder = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    if name == "classifier":
        return keras.Model(encoder.inputs, heads.classification_head(encoder.output, 3, 0.0))
    model = keras.Model(encoder.inputs, heads.global_pointer_head(encoder.output, encoder.inputs[0], 2, 4))
    model.compile(optimizer="adam", loss=losses.global_pointer_crossentropy)
    return model


#: the BERT family's Backbones, each with the options that add layers
BERT_FAMILY = {"bert_nsp_mlm": ("bert", {"with_nsp": True, "with_mlm": True}),
               "albert_unilm": ("albert", {"application": "unilm"}),
               "albert_unshared_pool": ("albert_unshared", {"with_pool": "linear"}),
               "nezha_mlm": ("nezha", {"with_mlm": True}),
               "roformer_lm": ("roformer", {"application": "lm"}),
               "electra_discriminator": ("electra", {"with_discriminator": True})}
NAMES = ["gau_alpha_mlm", "roformer_v2_lm", "srupp_mlm", "classifier", "global_pointer", *BERT_FAMILY]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """{name: (predictions here, error or None in the fresh process, its predictions file)}: every
    model saved here, then loaded and run by one fresh process, one after the other."""
    root = tmp_path_factory.mktemp("serialization")
    rng = np.random.default_rng(1234)
    jobs, expected = [], {}
    for name in NAMES:
        keras.utils.set_random_seed(1234)
        model = _build(name)
        ids = rng.integers(1, 60, size=(2, 9)).astype("int32")
        ids[1, 6:] = 0
        inputs = [ids] + ([np.zeros_like(ids)] if len(model.inputs) > 1 else [])
        expected[name] = np.asarray(keras.tree.flatten(model.predict(inputs, verbose=0))[0])
        model.save(root / f"{name}.keras")
        paths = [str(root / f"{name}_input{i}.npy") for i in range(len(inputs))]
        for path, array in zip(paths, inputs):
            np.save(path, array)
        jobs.append(dict(name=name, path=str(root / f"{name}.keras"), inputs=paths, out=str(root / f"{name}.npy")))
    env = {k: v for k, v in os.environ.items() if k != "GAU_KERAS_TF_FREE"}
    result = subprocess.run([sys.executable, "-c", LOAD, json.dumps(jobs), str(root / "results.json")],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    errors = json.loads((root / "results.json").read_text())
    return {job["name"]: (expected[job["name"]], errors[job["name"]], job["out"]) for job in jobs}


@pytest.mark.parametrize("name", NAMES)
def test_keras_file_loads_after_import_gau_keras_only(loaded, name):
    expected, error, out = loaded[name]
    assert error is None, error
    np.testing.assert_allclose(np.load(out), expected, atol=1e-5)
