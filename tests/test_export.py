"""``gau-keras export``: SavedModels that a process without Keras or gau_keras
serves through their ``serving_default`` signature, with the same outputs."""

import contextlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

from gau_keras import __main__ as cli
from gau_keras import build_transformer_model, export
from gau_keras.layers import heads
from gau_keras.models.presets import default_model_dir
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
    np.savez(out, **{name: value.numpy().astype("S") if value.dtype == tf.string else value.numpy()
                     for name, value in outputs.items()})
added = sorted(m for m in set(sys.modules) - before if "keras" in m)
assert not added, f"loading and serving imported {added[:5]}"
"""


#: the process's SRU++ kernel choice before any export ran
SRU_KERNEL_BEFORE = os.environ.get("GAU_KERAS_SRU_KERNEL")


def _ids(rng, batch=2, length=11, vocab=60):
    ids = rng.integers(5, vocab, size=(batch, length)).astype("int32")
    ids[:, 0], ids[1, 7:] = 2, 0
    return ids


def _export_bundled(root, rng):
    out = root / "serving" / "gau_alpha" / "1"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert (
            cli.main(
                [
                    "export",
                    "--output",
                    str(out),
                    "--model-dir",
                    os.path.join(os.path.dirname(cli.__file__), "pretrained", "gau_alpha_tiny"),
                ]
            )
            == 0
        )
    assert "serving_default(token_ids, segment_ids)" in printed.getvalue()
    model, tokenizer = load_pretrained(None, with_mlm=True)
    ids = _ids(rng, vocab=tokenizer.vocab_size)
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
    return out, inputs, {"probabilities": model.predict([ids, np.zeros_like(ids)], verbose=0)}


#: the classifier's --labels: its label_names output, served as UTF-8 bytes
LABELS = ["体育", "财经", "科技", "娱乐"]


def _export_classifier(root, rng):
    encoder = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    model = keras.Model(encoder.inputs, heads.classification_head(encoder.output, 4, 0.0))
    model.save(root / "classifier.keras")
    out = root / "classifier_saved"
    (root / "labels.txt").write_text("".join(name + "\n" for name in LABELS), encoding="utf-8")
    assert (
        cli.main(
            [
                "export",
                "--keras",
                str(root / "classifier.keras"),
                "--output",
                str(out),
                "--labels",
                str(root / "labels.txt"),
            ]
        )
        == 0
    )
    ids = _ids(rng)
    logits = model.predict([ids, np.zeros_like(ids)], verbose=0)
    return (
        out,
        {"token_ids": ids, "segment_ids": np.zeros_like(ids)},
        {
            "logits": logits,
            "probabilities": keras.ops.convert_to_numpy(keras.ops.softmax(logits)),
            "labels": logits.argmax(-1),
            "label_names": np.array([LABELS[i].encode() for i in logits.argmax(-1)]),
        },
    )


def _export_srupp(root, rng):
    model = build_transformer_model(
        model="srupp", with_mlm=True, vocab_size=60, hidden_size=16, num_hidden_layers=2, proj_size=8
    )
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
    for name, write in EXPORTS.items():
        keras.utils.set_random_seed(1234)
        saved_model, inputs, expected = write(root, rng)
        paths = {key: str(root / f"{name}_{key}.npy") for key in inputs}
        for key, array in inputs.items():
            np.save(paths[key], array)
        cases[name] = (saved_model, inputs, expected, root / f"{name}_served.npz")
        jobs.append([str(saved_model), paths, str(root / f"{name}_served.npz")])
    env = {k: v for k, v in os.environ.items() if k != "GAU_KERAS_TF_FREE"}
    result = subprocess.run(
        [sys.executable, "-c", SERVE, json.dumps(jobs)], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        name: (saved_model, inputs, expected, dict(np.load(out)))
        for name, (saved_model, inputs, expected, out) in cases.items()
    }


def _assert_served(case):
    _, _, expected, got = case
    assert set(got) == set(expected)
    for name, value in expected.items():
        if value.dtype.kind == "S":
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], value, atol=1e-5, err_msg=name)


def test_export_model_dir_serves_mlm_probabilities(served, capsys):
    _assert_served(served["bundled"])
    out = served["bundled"][0]
    assert cli.main(["export", "--output", str(out), "--model-dir", "unused"]) == 2  # no silent overwrite
    assert "--overwrite" in capsys.readouterr().err


def test_export_classifier_keras_file_serves_labels(served):
    _assert_served(served["classifier"])  # label_names from --labels too: the client needs nothing else
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
    # the XLA loops were chosen for the export only: the process's own choice is left as it was
    assert os.environ.get("GAU_KERAS_SRU_KERNEL") == SRU_KERNEL_BEFORE


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
        cli.main(["export", "--output", str(tmp_path / "o")])  # a source is required


@pytest.fixture(scope="module")
def run_keras(tmp_path_factory):
    """A fine-tuning run's folder as the runner leaves it: ``eprstmt_best.keras`` (a tiny two-label
    classifier) and ``eprstmt_metrics.json`` naming the task."""
    run = tmp_path_factory.mktemp("run")
    keras.utils.set_random_seed(7)
    encoder = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    keras.Model(encoder.inputs, heads.classification_head(encoder.output, 2, 0.0)).save(run / "eprstmt_best.keras")
    (run / "eprstmt_metrics.json").write_text(json.dumps({"task": "eprstmt", "finished": True}))
    return run / "eprstmt_best.keras"


def _fake_saved_model(model, path, *args):
    """Stands in for `export.export_saved_model` where only the folders matter: what it writes."""
    os.makedirs(os.path.join(path, "variables"))
    open(os.path.join(path, "saved_model.pb"), "wb").close()
    return ["token_ids", "segment_ids"]


def _tree(root):
    """Every file and folder under ``root`` with the files' contents: what a command must leave alone."""
    return sorted(
        (
            os.path.relpath(os.path.join(folder, name), root),
            open(os.path.join(folder, name), "rb").read() if name in files else None,
        )
        for folder, dirs, files in os.walk(root)
        for name in dirs + files
    )


def _error(capsys):
    err = capsys.readouterr().err
    assert err.startswith("error: export: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_export_never_replaces_what_is_not_an_earlier_export(tmp_path, monkeypatch, capsys, run_keras):
    """B5: --output "" (an unset variable), ".", the working directory or a folder above it, and a
    folder that holds more than a SavedModel are refused, with or without --overwrite."""
    monkeypatch.setattr(export, "export_saved_model", _fake_saved_model)
    source = str(shutil.copy(run_keras, tmp_path / "model.keras"))
    work = tmp_path / "work"
    (work / "mine").mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    (work / "mine" / "a.txt").write_text("mine")
    _fake_saved_model(None, work / "earlier")
    (work / "earlier" / "README.txt").write_text("a SavedModel and a file of mine")
    monkeypatch.chdir(work)
    before = _tree(tmp_path)
    cases = {
        "": "names no new folder",
        ".": "names no new folder",
        str(work): "the working directory",
        "..": "the working directory or a folder above it",
        "mine": "holds other files than a SavedModel",
        "earlier": "holds other files than a SavedModel",
    }
    for output, why in cases.items():
        for overwrite in ([], ["--overwrite"]):
            assert cli.main(["export", "--keras", source, "--output", output, *overwrite]) == 2, output
            assert why in _error(capsys)
    assert _tree(tmp_path) == before


def test_export_into_its_own_run_folder_is_refused(tmp_path, monkeypatch, capsys, run_keras):
    """B6: --keras RUN/x_best.keras --output RUN --overwrite kept the run (it deleted it, source included)."""
    monkeypatch.setattr(export, "export_saved_model", _fake_saved_model)
    run = shutil.copytree(run_keras.parent, tmp_path / "run")
    source = run / "eprstmt_best.keras"
    before = _tree(tmp_path)
    for output in (run, tmp_path, source):
        assert cli.main(["export", "--keras", str(source), "--output", str(output), "--overwrite"]) == 2
        assert f"is or holds the source {source}" in _error(capsys)
    (tmp_path / "models" / "m").mkdir(parents=True)  # a model directory's parent, likewise
    assert (
        cli.main(
            [
                "export",
                "--model-dir",
                str(tmp_path / "models" / "m"),
                "--output",
                str(tmp_path / "models"),
                "--overwrite",
            ]
        )
        == 2
    )
    assert "holds the source" in _error(capsys)
    shutil.rmtree(tmp_path / "models")
    assert _tree(tmp_path) == before


def test_export_stages_in_a_fresh_folder_and_removes_only_its_own(tmp_path, monkeypatch, capsys, run_keras):
    """The SavedModel is written next to --output under a fresh name: the user's ``<output>.partial`` stays
    (the old staging folder deleted it); --overwrite replaces an earlier export; a failed export leaves
    nothing of its own behind, neither the folders it made nor a half-written SavedModel."""
    monkeypatch.setattr(export, "export_saved_model", _fake_saved_model)
    serving = tmp_path / "serving"
    (serving / "1.partial").mkdir(parents=True)
    (serving / "1.partial" / "keep.txt").write_text("mine")
    argv = ["export", "--keras", str(run_keras), "--output", str(serving / "1")]
    assert cli.main(argv) == 0
    assert cli.main(argv) == 2 and "--overwrite" in _error(capsys)
    assert cli.main(argv + ["--overwrite"]) == 0
    assert sorted(os.listdir(serving)) == ["1", "1.partial"] and export.is_saved_model(serving / "1")
    assert (serving / "1.partial" / "keep.txt").read_text() == "mine"

    def fail(*args):
        raise RuntimeError("the export failed")

    monkeypatch.setattr(export, "export_saved_model", fail)
    before = _tree(tmp_path)
    for output in (serving / "1", tmp_path / "new" / "deep" / "1"):
        with pytest.raises(RuntimeError):
            cli.main(["export", "--keras", str(run_keras), "--output", str(output), "--overwrite"])
        assert _tree(tmp_path) == before


def test_export_to_an_unwritable_folder_says_which(tmp_path, monkeypatch, capsys, run_keras):
    monkeypatch.setattr(export, "export_saved_model", _fake_saved_model)
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() == 0:  # root writes into a read-only folder: what the OS answers anyone else

        def refuse(*args, dir=None, **kwargs):
            raise PermissionError(13, "Permission denied", dir)

        monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    locked.chmod(0o555)
    try:
        status = cli.main(["export", "--keras", str(run_keras), "--output", str(locked / "1")])
    finally:
        locked.chmod(0o755)
    assert status == 2 and os.path.realpath(locked) in _error(capsys)
    (tmp_path / "a_file").write_text("x")
    assert cli.main(["export", "--keras", str(run_keras), "--output", str(tmp_path / "a_file" / "1")]) == 2
    assert f"{os.path.realpath(tmp_path / 'a_file')} is a file, not a folder" in _error(capsys)
    assert os.listdir(locked) == []


def test_export_damaged_keras_files_are_one_line_errors(tmp_path, capsys, run_keras):
    with zipfile.ZipFile(run_keras) as whole:
        members = {name: whole.read(name) for name in whole.namelist()}
    damaged = {
        "no_config": {k: v for k, v in members.items() if k != "config.json"},
        "no_weights": {k: v for k, v in members.items() if k != "model.weights.h5"},
        "bad_config": {**members, "config.json": b"{"},
        "cut_weights": {**members, "model.weights.h5": members["model.weights.h5"][:5000]},
    }
    for name, content in damaged.items():
        with zipfile.ZipFile(tmp_path / f"{name}.keras", "w") as z:
            for member, data in content.items():
                z.writestr(member, data)
    (tmp_path / "empty.keras").write_bytes(b"")
    (tmp_path / "cut.keras").write_bytes(run_keras.read_bytes()[: len(run_keras.read_bytes()) // 2])
    (tmp_path / "folder.keras").mkdir()
    for name in list(damaged) + ["empty", "cut", "folder"]:
        path = tmp_path / f"{name}.keras"
        assert cli.main(["export", "--keras", str(path), "--output", str(tmp_path / "out")]) == 2, name
        assert f"--keras {path} " in _error(capsys)
    assert not (tmp_path / "out").exists()


def test_export_electra_model_dir_says_what_to_do(tmp_path, capsys):
    from tests.finetune_utils import tiny_model_dir

    model_dir = tiny_model_dir(str(tmp_path / "electra"), ["今天天气很好"], model="electra")
    assert cli.main(["export", "--model", "electra", "--model-dir", model_dir, "--output", str(tmp_path / "o")]) == 2
    err = _error(capsys)
    assert "--model electra has no MLM head" in err and "--keras" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.both_backends
def test_export_classifier_carries_its_run_label_names(tmp_path, capsys, run_keras):
    """A fine-tuning run's .keras exports with ``label_names`` (the task its metrics file names), on
    TensorFlow and on JAX (jax2tf) alike; a --labels file of the wrong length is refused."""
    import tensorflow as tf

    out = tmp_path / "serving" / "1"
    assert cli.main(["export", "--keras", str(run_keras), "--output", str(out)]) == 0
    assert "label_names: 2 labels" in capsys.readouterr().out
    ids = _ids(np.random.default_rng(0), batch=3, length=9)
    logits = keras.saving.load_model(run_keras).predict([ids, np.zeros_like(ids)], verbose=0)
    loaded = tf.saved_model.load(str(out))
    assert list(loaded.signatures) == ["serving_default"]  # the model's own endpoint is no signature
    got = loaded.signatures["serving_default"](token_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids))
    assert set(got) == {"logits", "probabilities", "labels", "label_names"}
    np.testing.assert_allclose(got["logits"].numpy(), logits, atol=1e-5)
    assert [x.decode() for x in got["label_names"].numpy()] == [("Negative", "Positive")[i] for i in logits.argmax(-1)]
    (tmp_path / "labels.txt").write_text("a\nb\nc\n")
    assert (
        cli.main(
            [
                "export",
                "--keras",
                str(run_keras),
                "--output",
                str(tmp_path / "o"),
                "--labels",
                str(tmp_path / "labels.txt"),
            ]
        )
        == 2
    )
    assert f"--labels {tmp_path / 'labels.txt'} holds 3 names but the model has 2 labels" in _error(capsys)


def test_export_names_both_lengths_for_a_sequence_past_the_positions(tmp_path):
    """A model with learned positions (BERT: 16 here) refuses a longer input in its signature, naming both
    lengths, instead of a shape error deep in the graph (issue 51, item 9)."""
    import tensorflow as tf

    bert = build_transformer_model(
        model="bert",
        vocab_size=60,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        hidden_act="gelu",
        max_position_embeddings=16,
        type_vocab_size=2,
    )
    model = keras.Model(bert.inputs, heads.classification_head(bert.output, 3, 0.0))
    export.export_saved_model(model, str(tmp_path / "bert"))
    signature = tf.saved_model.load(str(tmp_path / "bert")).signatures["serving_default"]
    ids = np.full((1, 16), 3, dtype="int32")
    assert signature(token_ids=ids, segment_ids=np.zeros_like(ids))["labels"].shape == (1,)
    ids = np.full((1, 20), 3, dtype="int32")
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"input token_ids is longer than the 16 positions of the model "
        r"\(max_position_embeddings=16\); its length.*20",
    ):
        signature(token_ids=ids, segment_ids=np.zeros_like(ids))


# ------------------------------------------------------------------- --hf: a Hugging Face directory
HF_FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "hf"


def _same_tensors(written, arch):
    """The tensors of an export equal those of the transformers-written fixture they share
    (all but the pooler, the NSP head and buffers, which the exported model lacks)."""
    ours, theirs = load_file(written), load_file(HF_FIXTURES / arch / "model.safetensors")
    assert len(set(ours) & set(theirs)) >= len(theirs) - 4
    for name in set(ours) & set(theirs):
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


def test_export_hf_writes_a_hugging_face_directory(tmp_path, capsys):
    out = tmp_path / "hf"
    assert cli.main(["export", "--model-dir", str(HF_FIXTURES / "bert"), "--hf", str(out)]) == 0
    assert "wrote a Hugging Face model directory" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text(encoding="utf-8"))["architectures"] == ["BertForMaskedLM"]
    assert (out / "vocab.txt").is_file()
    _same_tensors(out / "model.safetensors", "bert")
    assert cli.main(["export", "--model-dir", str(HF_FIXTURES / "gpt2"), "--hf", str(out)]) == 2  # no overwrite
    assert "already holds" in capsys.readouterr().err
    assert cli.main(["export", "--model-dir", str(HF_FIXTURES / "gpt2"), "--hf", str(out), "--overwrite"]) == 0
    _same_tensors(out / "model.safetensors", "gpt2")


def test_export_hf_from_a_released_tf1_directory(tmp_path):
    """TF1 checkpoint -> Hugging Face files: the weights arrive under transformers' names."""
    released = tmp_path / "released"
    bert = build_transformer_model(
        checkpoint_path=HF_FIXTURES / "bert", model=None, with_mlm="linear", return_keras_model=False
    )
    bert.save_weights_as_checkpoint(str(released / "bert_model.ckpt"))
    config = json.loads((HF_FIXTURES / "bert" / "config.json").read_text(encoding="utf-8"))
    (released / "bert_config.json").write_text(
        json.dumps({k: v for k, v in config.items() if k not in ("model_type", "architectures")}), encoding="utf-8"
    )
    (released / "vocab.txt").write_bytes((HF_FIXTURES / "bert" / "vocab.txt").read_bytes())
    out = tmp_path / "hf"
    assert cli.main(["export", "--model-dir", str(released), "--model", "bert", "--hf", str(out)]) == 0
    _same_tensors(out / "model.safetensors", "bert")


def test_export_hf_refuses_what_it_cannot_write(tmp_path, capsys):
    assert cli.main(["export", "--model-dir", default_model_dir(), "--hf", str(tmp_path / "hf")]) == 2
    assert "a GAU_alpha cannot be written as Hugging Face files" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(
            ["export", "--model-dir", default_model_dir(), "--hf", str(tmp_path / "a"), "--output", str(tmp_path / "b")]
        )
