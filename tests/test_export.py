"""``gau-keras export``: SavedModels that a process without Keras or gau_keras
serves through their ``serving_default`` signature, with the same outputs."""
import contextlib
import io
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from gau_keras import __main__ as cli
from gau_keras import build_transformer_model
from gau_keras.layers import heads
from gau_keras.pretrained import load_pretrained
from tests.model_utils import TINY

#: gau_keras cannot be imported at all; `import tensorflow` itself pulls in the keras
#: package (TF's tf.keras loader), so the check is that loading and serving add no module.
#: argv[1]: JSON list of [SavedModel, {input name: .npy path}, output .npz]
SERVE = """
import json, sys

class NoGauKeras:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "gau_keras":
            raise ImportError("the serving process must not need gau_keras: " + name)

sys.meta_path.insert(0, NoGauKeras())
import numpy as np
import tensorflow as tf
before = set(sys.modules)
for saved_model, paths, out in json.loads(sys.argv[1]):
    signature = tf.saved_model.load(saved_model).signatures["serving_default"]
    outputs = signature(**{name: tf.constant(np.load(path)) for name, path in paths.items()})
    np.savez(out, **{name: value.numpy() for name, value in outputs.items()})
added = sorted(m for m in set(sys.modules) - before if "keras" in m)
assert not added, f"loading and serving imported {added[:5]}"
"""


def _ids(rng, batch=2, length=11, vocab=60):
    ids = rng.integers(5, vocab, size=(batch, length)).astype("int32")
    ids[:, 0], ids[1, 7:] = 2, 0
    return ids


def _export_bundled(root, rng):
    out = root / "serving" / "gau_alpha" / "1"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["export", "--output", str(out), "--model-dir",
                         os.path.join(os.path.dirname(cli.__file__), "pretrained", "gau_alpha_tiny")]) == 0
    assert "serving_default(token_ids, segment_ids)" in printed.getvalue()
    model, tokenizer = load_pretrained(None, with_mlm=True)
    ids = _ids(rng, vocab=tokenizer.vocab_size)
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
    return out, inputs, {"probabilities": model.predict([ids, np.zeros_like(ids)], verbose=0)}


def _export_classifier(root, rng):
    encoder = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    model = keras.Model(encoder.inputs, heads.classification_head(encoder.output, 4, 0.0))
    model.save(root / "classifier.keras")
    out = root / "classifier_saved"
    assert cli.main(["export", "--keras", str(root / "classifier.keras"), "--output", str(out)]) == 0
    ids = _ids(rng)
    logits = model.predict([ids, np.zeros_like(ids)], verbose=0)
    return out, {"token_ids": ids, "segment_ids": np.zeros_like(ids)}, {
        "logits": logits, "probabilities": keras.ops.convert_to_numpy(keras.ops.softmax(logits)),
        "labels": logits.argmax(-1)}


def _export_srupp(root, rng):
    model = build_transformer_model(model="srupp", with_mlm=True, vocab_size=60, hidden_size=16,
                                    num_hidden_layers=2, proj_size=8)
    model.save(root / "srupp.keras")
    out = root / "srupp_saved"
    assert cli.main(["export", "--keras", str(root / "srupp.keras"), "--output", str(out)]) == 0
    ids = _ids(rng)
    return out, {"token_ids": ids}, {"probabilities": model.predict(ids, verbose=0)}


EXPORTS = {"bundled": _export_bundled, "classifier": _export_classifier, "srupp": _export_srupp}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """{case: (SavedModel folder, inputs, expected outputs, outputs served by a fresh TensorFlow-only
    process)}: each case exported here, then all served by one process."""
    root = tmp_path_factory.mktemp("export")
    rng = np.random.default_rng(1234)
    cases, jobs = {}, []
    for name, export in EXPORTS.items():
        keras.utils.set_random_seed(1234)
        saved_model, inputs, expected = export(root, rng)
        paths = {key: str(root / f"{name}_{key}.npy") for key in inputs}
        for key, array in inputs.items():
            np.save(paths[key], array)
        cases[name] = (saved_model, inputs, expected, root / f"{name}_served.npz")
        jobs.append([str(saved_model), paths, str(root / f"{name}_served.npz")])
    env = {k: v for k, v in os.environ.items() if k != "GAU_KERAS_TF_FREE"}
    result = subprocess.run([sys.executable, "-c", SERVE, json.dumps(jobs)], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return {name: (saved_model, inputs, expected, dict(np.load(out)))
            for name, (saved_model, inputs, expected, out) in cases.items()}


def _assert_served(case):
    _, _, expected, got = case
    assert set(got) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=1e-5, err_msg=name)


def test_export_model_dir_serves_mlm_probabilities(served, capsys):
    _assert_served(served["bundled"])
    out = served["bundled"][0]
    assert cli.main(["export", "--output", str(out), "--model-dir", "unused"]) == 2    # no silent overwrite
    assert "--overwrite" in capsys.readouterr().err


def test_export_classifier_keras_file_serves_labels(served):
    _assert_served(served["classifier"])
    # ids outside the embeddings are refused, naming the input (a negative id indexed from the end)
    import tensorflow as tf

    saved_model, inputs, _, _ = served["classifier"]
    ids = inputs["token_ids"]
    signature = tf.saved_model.load(str(saved_model)).signatures["serving_default"]
    for name, bad, size in (("token_ids", -1, 60), ("token_ids", 60, 60), ("segment_ids", 2, 2)):
        inputs = {"token_ids": ids.copy(), "segment_ids": np.zeros_like(ids)}
        inputs[name][0, 3] = bad
        with pytest.raises(tf.errors.InvalidArgumentError, match=rf"input {name} holds an id outside \[0, {size}\)"):
            signature(**{k: tf.constant(v) for k, v in inputs.items()})


def test_export_srupp_uses_plain_tensorflow_ops(served):
    _assert_served(served["srupp"])


def test_export_errors(tmp_path, capsys):
    import zipfile

    assert cli.main(["export", "--keras", str(tmp_path / "missing.keras"), "--output", str(tmp_path / "o")]) == 2
    assert "missing.keras" in capsys.readouterr().err
    archive = tmp_path / "whole.keras"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("config.json", "{}" * 500)
    (tmp_path / "cut.keras").write_bytes(archive.read_bytes()[:200])
    (tmp_path / "text.keras").write_text("not a model")
    for name in ("cut.keras", "text.keras"):
        assert cli.main(["export", "--keras", str(tmp_path / name), "--output", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err == f"error: export: --keras {tmp_path / name} is not a .keras archive, or truncated\n"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert cli.main(["export", "--keras", str(archive), "--output", str(a_file)]) == 2
    assert capsys.readouterr().err == f"error: export: --output {a_file} is a file, not a folder\n"
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        cli.main(["export", "--output", str(tmp_path / "o")])        # a source is required
