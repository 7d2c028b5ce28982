"""Call the original bert4keras (``bert4keras_forward.py``) from tests, in a subprocess.

bert4keras needs Keras 2 (``tf_keras``) while the test process runs Keras 3, so
every call starts a fresh interpreter with ``TF_KERAS=1 TF_USE_LEGACY_KERAS=1``.
The reference runs on CPU (``CUDA_VISIBLE_DEVICES=""``) so its float32 results
do not depend on the accelerator (no TF32 matmuls).

Typical use::

    from tests.reference.harness import run_bert4keras

    ref = run_bert4keras(config_dict, "gau_alpha", init_random=True,
                         save_checkpoint=tmp_path / "b4k" / "model.ckpt",
                         token_ids=ids, segment_ids=segs, with_mlm=True)
    ref["hidden"], ref["mlm_logits"], ref["variables"]

A test calling it is skipped (with the reason) when bert4keras or tf_keras is not
installed (the reference process itself exits with ``EXIT_MISSING_PACKAGE``;
``require_bert4keras()`` checks it up front, in one extra process, where wanted);
any other failure of the reference raises ``RuntimeError`` carrying the command
and the end of its stderr.
"""

import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np

SCRIPT = pathlib.Path(__file__).resolve().with_name("bert4keras_forward.py")
EXIT_MISSING_PACKAGE = 3
INSTALL_HINT = "pip install -r requirements.txt && pip install --no-deps -r tests/reference/requirements.txt"
_STDERR_TAIL = 4000


def reference_env(pythonpath=None):
    """Environment for the reference process: Keras 2 via tf_keras, CPU, quiet logs."""
    env = dict(os.environ)
    env.update(TF_KERAS="1", TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


@functools.cache
def probe(pythonpath=None):
    """Return ``(available, detail)``: can the reference run here, and which versions."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--probe"],
        env=reference_env(pythonpath),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode == 0:
        return True, result.stdout.strip()
    if result.returncode == EXIT_MISSING_PACKAGE:
        return False, result.stderr.strip().splitlines()[-1]
    raise RuntimeError(
        "bert4keras reference probe failed (exit %d):\n%s" % (result.returncode, result.stderr[-_STDERR_TAIL:])
    )


def require_bert4keras(pythonpath=None):
    """Skip the calling test unless the reference can run; return the version line."""
    available, detail = probe(None if pythonpath is None else str(pythonpath))
    if not available:
        _skip(detail)
    return detail


def _skip(detail):
    import pytest

    pytest.skip(
        "original bert4keras reference unavailable in a subprocess (%s); install it with: %s" % (detail, INSTALL_HINT)
    )


def run_bert4keras(
    config,
    model,
    *,
    checkpoint=None,
    init_random=False,
    save_checkpoint=None,
    token_ids=None,
    segment_ids=None,
    with_mlm=False,
    application="encoder",
    softmax_plus_min_len=None,
    seed=0,
    pythonpath=None,
    timeout=600,
):
    """Run bert4keras on one model and return its results.

    Args:
        config: bert_config.json path, or a dict written to a temporary one.
        model: 'gau_alpha' or 'roformer_v2'.
        checkpoint: TF1 checkpoint prefix to load (exclusive with ``init_random``).
        init_random: build with random weights (numpy and TF graph seed ``seed``).
        save_checkpoint: write the weights there with bert4keras's ``save_weights_as_checkpoint``.
        token_ids, segment_ids: int arrays [B, L]; when given, the forward pass runs.
        with_mlm: False, True (softmax) or an activation name, as in bert4keras.
        application: 'encoder', 'lm' or 'unilm', or a list of them (one process
            runs them in turn on the same weights).
        softmax_plus_min_len: floor on softmax_plus's n (None: bert4keras 0.11.5's 16).
        pythonpath: directory put first on PYTHONPATH (e.g. another bert4keras version).

    Returns:
        dict with 'hidden' [B, L, H], with the MLM head also 'mlm_logits' and
        'mlm_output' [B, L, V] (for a list of applications: {application: that
        dict}); with ``save_checkpoint`` also 'variables', a dict
        {checkpoint variable name: shape list} as printed by the script.
    """
    if (token_ids is None) != (segment_ids is None):
        raise ValueError("run_bert4keras: give both token_ids and segment_ids, or neither")
    with tempfile.TemporaryDirectory(prefix="bert4keras_ref_") as work:
        work = pathlib.Path(work)
        if isinstance(config, dict):
            config_path = work / "bert_config.json"
            config_path.write_text(json.dumps(config), encoding="utf-8")
        else:
            config_path = pathlib.Path(config)
        cmd = [
            sys.executable,
            str(SCRIPT),
            "--config",
            str(config_path),
            "--model",
            model,
            "--application",
            application if isinstance(application, str) else ",".join(application),
            "--seed",
            str(seed),
        ]
        if init_random:
            cmd.append("--init-random")
        if checkpoint is not None:
            cmd += ["--checkpoint", str(checkpoint)]
        if save_checkpoint is not None:
            cmd += ["--save-checkpoint", str(save_checkpoint)]
        if with_mlm:
            cmd += ["--with-mlm", "true" if with_mlm is True else str(with_mlm)]
        if softmax_plus_min_len is not None:
            cmd += ["--softmax-plus-min-len", str(softmax_plus_min_len)]
        if token_ids is not None:
            np.savez(work / "in.npz", token_ids=np.asarray(token_ids), segment_ids=np.asarray(segment_ids))
            cmd += ["--inputs", str(work / "in.npz"), "--output", str(work / "out.npz")]
        result = subprocess.run(cmd, env=reference_env(pythonpath), capture_output=True, text=True, timeout=timeout)
        if result.returncode == EXIT_MISSING_PACKAGE:
            _skip(result.stderr.strip().splitlines()[-1])
        if result.returncode != 0:
            raise RuntimeError(
                "bert4keras reference failed (exit %d): %s\n%s"
                % (result.returncode, " ".join(cmd), result.stderr[-_STDERR_TAIL:])
            )
        outputs = {}
        if token_ids is not None:
            with np.load(work / "out.npz") as data:
                outputs = {key: data[key] for key in data.files}
            if not isinstance(application, str) and len(application) == 1:
                outputs = {application[0]: outputs}
            elif not isinstance(application, str):
                outputs = {
                    app: {key.split(":", 1)[1]: value for key, value in outputs.items() if key.startswith(app + ":")}
                    for app in application
                }
    if save_checkpoint is not None:
        outputs["variables"] = _parse_variables(result.stdout)
    return outputs


def _parse_variables(stdout):
    """{name: shape} from the script's ``variable<TAB>name<TAB>shape`` lines."""
    variables = {}
    for line in stdout.splitlines():
        if line.startswith("variable\t"):
            _, name, shape = line.split("\t")
            variables[name] = json.loads(shape)
    return variables


EXEC_SCRIPT = pathlib.Path(__file__).resolve().with_name("bert4keras_exec.py")


def run_bert4keras_code(code, inputs=None, *, graph=False, seed=0, timeout=600):
    """Run ``code`` (Python source) against the original bert4keras in a subprocess.

    The code sees ``np``, ``tf``, ``keras`` (tf_keras), ``K``, ``bert4keras`` and
    ``inputs`` (the arrays of ``inputs``, a dict of numpy arrays / lists), and
    fills the dict ``outputs``; this returns that dict as numpy arrays. ``graph``
    runs it in TF1 graph mode (bert4keras's optimizers need it); tensors left in
    ``outputs`` are evaluated. See ``bert4keras_exec.py`` for the shim. Skips
    the calling test when bert4keras or tf_keras is missing. With
    ``$GAU_KERAS_REFERENCE_CACHE`` set, a result is kept there and the same call
    again (code, inputs, versions) reads it instead of running bert4keras.
    """
    cached = _cache_path(code, inputs, graph, seed)
    if cached is not None and cached.is_file():
        with np.load(cached, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    # no up-front probe (a TensorFlow start less): the script itself exits EXIT_MISSING_PACKAGE
    with tempfile.TemporaryDirectory(prefix="bert4keras_exec_") as work:
        work = pathlib.Path(work)
        (work / "snippet.py").write_text(code, encoding="utf-8")
        cmd = [
            sys.executable,
            str(EXEC_SCRIPT),
            "--code",
            str(work / "snippet.py"),
            "--output",
            str(work / "out.npz"),
            "--seed",
            str(seed),
        ]
        if inputs:
            np.savez(work / "in.npz", **{k: np.asarray(v) for k, v in inputs.items()})
            cmd += ["--inputs", str(work / "in.npz")]
        if graph:
            cmd.append("--graph")
        result = subprocess.run(cmd, env=reference_env(), capture_output=True, text=True, timeout=timeout)
        if result.returncode == EXIT_MISSING_PACKAGE:
            _skip(result.stderr.strip().splitlines()[-1])
        if result.returncode != 0:
            raise RuntimeError(
                "bert4keras snippet failed (exit %d):\n%s\n%s"
                % (result.returncode, code, result.stderr[-_STDERR_TAIL:])
            )
        if cached is not None:
            partial = cached.with_suffix(f".{os.getpid()}.partial")
            shutil.copyfile(work / "out.npz", partial)
            os.replace(partial, cached)
        with np.load(work / "out.npz", allow_pickle=False) as data:
            return {key: data[key] for key in data.files}


#: folder of run_bert4keras_code's saved results (tests/conftest.py points it into pytest's cache)
CACHE_ENV = "GAU_KERAS_REFERENCE_CACHE"


def _cache_path(code, inputs, graph, seed):
    """Where the reference's result for these arguments is kept, or None (no cache folder, or
    bert4keras / tf_keras not installed). The README's test command runs the suite on TensorFlow
    and then on JAX: the JAX pass reads the reference results the first pass computed. The key
    covers everything the result depends on: the code, the inputs, the shim and the versions."""
    folder = os.environ.get(CACHE_ENV)
    if not folder:
        return None
    try:
        versions = [importlib.metadata.version(name) for name in ("bert4keras", "tf_keras", "tensorflow")]
    except importlib.metadata.PackageNotFoundError:
        return None
    digest = hashlib.sha256()
    for part in [code, EXEC_SCRIPT.read_text(encoding="utf-8"), repr((graph, seed, versions))]:
        digest.update(part.encode("utf-8") + b"\0")
    for key, value in sorted((inputs or {}).items()):
        array = np.asarray(value)
        digest.update(repr((key, array.dtype.str, array.shape)).encode("utf-8"))
        digest.update(array.tobytes() if array.dtype != object else repr(array.tolist()).encode("utf-8"))
    pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
    return pathlib.Path(folder) / f"{digest.hexdigest()}.npz"
