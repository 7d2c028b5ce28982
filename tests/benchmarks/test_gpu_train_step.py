"""benchmarks/gpu_train_step.py on this CPU at tiny sizes (a smoke test: no timing is asserted)."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, without_tensorflow_env

SCRIPT = REPO_ROOT / "benchmarks" / "gpu_train_step.py"


@pytest.mark.jax_only
def test_tiny_run_reports_every_model_and_length(tmp_path):
    lines = tmp_path / "steps.jsonl"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--rounds", "1", "--steps", "1", "--json", str(lines)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    models = ("RoFormerV2", "GAU-α", "GAU-α plain JAX")
    assert {(r["model"], r["length"]) for r in records} >= {(m, n) for m in models for n in (16, 32)}
    for r in records:
        assert r["ms"] > 0 and 0 < r["mfu"] and r["temp_bytes"] > 0 and r["bytes_accessed"] > 0 and r["fusions"] > 0
        assert r["batch"] * r["length"] == 64 and r["dtype"] == "float32"
    assert "matrix rate measured" in run.stdout and "| 32 (2) | GAU-α |" in run.stdout
    assert "| 32 (2) | GAU-α plain JAX |" in run.stdout and "GAU-α / plain JAX time" in run.stdout


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--lengths", "100"], "--lengths"),
        (["--tokens", "0"], "--tokens"),
        (["--hidden", "30", "--heads", "4"], "--hidden"),
        (["--dtype", "float16"], "--dtype"),
        (["--trace", "t", "--compile-only"], "--trace"),
    ],
)
def test_bad_options_are_refused_by_name(argv, flag):
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", *argv], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    assert run.returncode == 2 and flag in run.stderr, run.stderr


def test_keras_hub_backbone_gets_the_token_and_segment_ids():
    """The keras-hub row is keras-hub's RoformerV2Backbone on the same ids (its padding mask: ids != 0)."""
    pytest.importorskip("keras_hub", reason="keras-hub is optional (the benchmark leaves its row out without it)")
    import numpy as np

    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_train_step

    args = gpu_train_step.arguments(["--tiny"])
    model = gpu_train_step.build("keras-hub RoFormerV2", args, "float32")
    backbone = [layer for layer in model.layers if type(layer).__name__ == "RoformerV2Backbone"][0]
    ids = np.random.default_rng(0).integers(1, 128, (2, 16)).astype("int32")
    ids[1, 10:] = 0
    segments = (np.arange(16)[None] >= 8).astype("int32").repeat(2, 0)
    direct = backbone({"token_ids": ids, "segment_ids": segments})
    np.testing.assert_allclose(np.asarray(model([ids, segments])), np.asarray(direct), rtol=1e-6, atol=1e-6)


@pytest.mark.jax_only
def test_trace_gives_a_per_op_table_that_accounts_for_the_step(tmp_path):
    """--trace: the jax.profiler trace of each model is read back into a per-op time table whose
    instructions are attributed to categories and to the model code (layer numbers folded). Run as
    on a GPU image, where TensorFlow is not installed: nothing on the way may import it."""
    env = without_tensorflow_env(tmp_path)
    traces = tmp_path / "traces"
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--tiny",
            "--lengths",
            "32",
            "--rounds",
            "1",
            "--steps",
            "1",
            "--trace",
            str(traces),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert {p.name for p in traces.iterdir()} >= {"GAU-α-L32", "RoFormerV2-L32"}
    sections = run.stdout.split("### ")[1:]
    titles = [s.splitlines()[0] for s in sections]
    assert any(t.startswith("GAU-α, L 32 (batch 2)") for t in titles), titles
    gau = next(s for s in sections if s.startswith("GAU-α, L 32"))
    assert "| matrix product |" in gau and "GatedAttentionUnit" in gau and "(backward)" in gau, gau
    categories = {
        line.split("|")[1].strip(): int(line.rsplit("|", 2)[-2].strip().rstrip("%"))
        for line in gau.split("| share |")[1].split("\n\n")[0].splitlines()[2:]
    }
    assert categories.get("?", 0) <= 2, categories  # (almost) every profiled instruction found in the program
    assert categories["matrix product"] >= 20, categories
