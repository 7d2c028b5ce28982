"""``gau-keras export``: SavedModels that a process without Keras or gau_keras
serves through their ``serving_default`` signature, with the same outputs."""
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
#: package (TF's tf.keras loader), so the check is that loading and serving add no module
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
loaded = tf.saved_model.load(sys.argv[1])
signature = loaded.signatures["serving_default"]
inputs = {name: tf.constant(np.load(path)) for name, path in json.loads(sys.argv[2]).items()}
outputs = signature(**inputs)
np.savez(sys.argv[3], **{name: value.numpy() for name, value in outputs.items()})
added = sorted(m for m in set(sys.modules) - before if "keras" in m)
assert not added, f"loading and serving imported {added[:5]}"
"""


def serve(tmp_path, saved_model, inputs):
    """Calls the SavedModel's signature in a fresh TensorFlow-only process."""
    paths = {}
    for name, array in inputs.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], array)
    out = tmp_path / "served.npz"
    env = {k: v for k, v in os.environ.items() if k != "GAU_KERAS_TF_FREE"}
    result = subprocess.run([sys.executable, "-c", SERVE, str(saved_model), json.dumps(paths), str(out)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(out))


def _ids(rng, batch=2, length=11, vocab=60):
    ids = rng.integers(5, vocab, size=(batch, length)).astype("int32")
    ids[:, 0], ids[1, 7:] = 2, 0
    return ids


def test_export_model_dir_serves_mlm_probabilities(tmp_path, rng, capsys):
    out = tmp_path / "serving" / "gau_alpha" / "1"
    assert cli.main(["export", "--output", str(out), "--model-dir",
                     os.path.join(os.path.dirname(cli.__file__), "pretrained", "gau_alpha_tiny")]) == 0
    assert "serving_default(token_ids, segment_ids)" in capsys.readouterr().out
    model, tokenizer = load_pretrained(None, with_mlm=True)
    ids = _ids(rng, vocab=tokenizer.vocab_size)
    served = serve(tmp_path, out, {"token_ids": ids, "segment_ids": np.zeros_like(ids)})
    assert set(served) == {"probabilities"}
    expected = model.predict([ids, np.zeros_like(ids)], verbose=0)
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)
    assert cli.main(["export", "--output", str(out), "--model-dir", "unused"]) == 2    # no silent overwrite
    assert "--overwrite" in capsys.readouterr().err


def test_export_classifier_keras_file_serves_labels(tmp_path, rng):
    encoder = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    model = keras.Model(encoder.inputs, heads.classification_head(encoder.output, 4, 0.0))
    model.save(tmp_path / "classifier.keras")
    out = tmp_path / "classifier_saved"
    assert cli.main(["export", "--keras", str(tmp_path / "classifier.keras"), "--output", str(out)]) == 0
    ids = _ids(rng)
    served = serve(tmp_path, out, {"token_ids": ids, "segment_ids": np.zeros_like(ids)})
    logits = model.predict([ids, np.zeros_like(ids)], verbose=0)
    np.testing.assert_allclose(served["logits"], logits, atol=1e-5)
    np.testing.assert_allclose(served["probabilities"], keras.ops.convert_to_numpy(keras.ops.softmax(logits)),
                               atol=1e-5)
    np.testing.assert_array_equal(served["labels"], logits.argmax(-1))
    # ids outside the embeddings are refused, naming the input (a negative id indexed from the end)
    import tensorflow as tf

    signature = tf.saved_model.load(str(out)).signatures["serving_default"]
    for name, bad, size in (("token_ids", -1, 60), ("token_ids", 60, 60), ("segment_ids", 2, 2)):
        inputs = {"token_ids": ids.copy(), "segment_ids": np.zeros_like(ids)}
        inputs[name][0, 3] = bad
        with pytest.raises(tf.errors.InvalidArgumentError, match=rf"input {name} holds an id outside \[0, {size}\)"):
            signature(**{k: tf.constant(v) for k, v in inputs.items()})


def test_export_srupp_uses_plain_tensorflow_ops(tmp_path, rng):
    model = build_transformer_model(model="srupp", with_mlm=True, vocab_size=60, hidden_size=16,
                                    num_hidden_layers=2, proj_size=8)
    model.save(tmp_path / "srupp.keras")
    out = tmp_path / "srupp_saved"
    assert cli.main(["export", "--keras", str(tmp_path / "srupp.keras"), "--output", str(out)]) == 0
    ids = _ids(rng)
    served = serve(tmp_path, out, {"token_ids": ids})
    np.testing.assert_allclose(served["probabilities"], model.predict(ids, verbose=0), atol=1e-5)


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
