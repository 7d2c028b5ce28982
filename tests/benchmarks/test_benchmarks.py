"""Smoke test of benchmarks/gau_vs_attention.py and checks of its helpers.

No timing is asserted: the quick run only has to produce a well-formed table
of positive numbers.
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, load_benchmark

BENCHMARKS = REPO_ROOT / "benchmarks"
SCRIPT = BENCHMARKS / "gau_vs_attention.py"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("gau_vs_attention")


@pytest.fixture(scope="module")
def common(bench):
    return sys.modules["_common"]


def _table_rows(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    assert len(lines) >= 3, f"no Markdown table in the output:\n{stdout}"
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert set(lines[1].strip("|").split("|")) == {"---"}
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_quick_run_prints_a_table_of_ratios():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--lengths", "64", "--backends", "tensorflow,jax"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows = _table_rows(result.stdout)
    assert [(row["L"], row["mode"], row["backend"]) for row in rows] == [
        ("64", "train", "tensorflow"),
        ("64", "train", "jax"),
        ("64", "infer", "tensorflow"),
        ("64", "infer", "jax"),
    ]
    assert [row["GAU-α time / TF's"] for row in rows[::2]] == ["1", "1"]  # TensorFlow's rows: their own ratio
    for row in rows:
        assert float(row["GAU-α time / TF's"]) > 0 and float(row["RoFormerV2 time / TF's"]) > 0, row
        for column in ("GAU-α ms", "RoFormerV2 ms", "time GAU/RoF", "FLOPs GAU/RoF"):
            assert float(row[column]) > 0, (column, row)
        if row["backend"] == "tensorflow":  # the allocator's statistics: every step allocates
            for column in ("GAU-α MiB", "RoFormerV2 MiB", "mem GAU/RoF"):
                assert float(row[column]) > 0, (column, row)
        else:  # JAX: the worker's peak RSS, which a tiny step may leave where it was
            assert float(row["GAU-α MiB"]) >= 0 and float(row["RoFormerV2 MiB"]) >= 0, row
        for column in ("GAU-α MFU", "RoFormerV2 MFU"):
            assert row[column].endswith("%") and float(row[column][:-1]) > 0, (column, row)
    assert "float32 matmul peak" in result.stdout


@pytest.mark.parametrize(
    "option, value", [("--modes", "train,fly"), ("--lengths", "128,x"), ("--backends", "tensorflow,torch")]
)
def test_bad_options_are_rejected_by_name(option, value):
    command = [sys.executable, str(SCRIPT), option, value]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode != 0 and option in result.stderr


def test_gau_layer_flops_hand_count(bench):
    # B=2, L=3, H=4, e=5, s=2. i_dense 2*6*4*12=576, q k^T 2*2*3*3*2=72,
    # A v 2*2*3*3*5=180, o_dense 2*6*5*4=240.
    assert bench.gau_layer_flops(tokens=6, length=3, hidden=4, units=5, key_size=2) == 1068


def test_mha_ffn_layer_flops_hand_count(bench):
    # B=2, L=3, H=4, 2 heads of 2, F=8. q,k,v,o 4*2*6*4*4=768, q k^T 2*(2*2)*3*3*2=144,
    # A v 144, FFN 2*2*6*4*8=768.
    assert bench.mha_ffn_layer_flops(tokens=6, length=3, hidden=4, heads=2, ffn=8) == 1824


def test_model_flops_match_the_documented_formula(bench):
    length, batch = 1000, 3
    gau = bench.model_flops("gau_alpha", bench.FULL_SIZES, batch, length, "infer")
    rof = bench.model_flops("roformer_v2", bench.FULL_SIZES, batch, length, "infer")
    assert gau == batch * (14_548_992 * length + 6656 * length**2)
    assert rof == batch * (14_155_776 * length + 3072 * length**2)
    assert bench.model_flops("gau_alpha", bench.FULL_SIZES, batch, length, "train") == 3 * gau


def test_median_ratio_pairs_repeats(common):
    assert common.median_ratio([2.0, 9.0, 3.0], [1.0, 3.0, 1.0]) == 3.0


def test_markdown_table(common):
    assert common.markdown_table(["a", "b"], [[1, "x"]]) == "| a | b |\n|---|---|\n| 1 | x |"


def test_memory_probe_sees_a_tensor_allocated_after_reset(common):
    import tensorflow as tf

    probe = common.MemoryProbe("CPU:0")
    probe.reset()
    x = tf.ones((1024, 1024)) + 1.0  # 4 MiB result
    peak = probe.peak_above_baseline()
    del x
    assert 4 * 2**20 <= peak < 64 * 2**20


def test_memory_probe_rss_fallback_sees_a_numpy_buffer(common):
    probe = common.MemoryProbe("CPU:0")
    probe.method = "rss"
    probe.reset()
    buffer = np.ones(2**21)  # 16 MiB, touched
    peak = probe.peak_above_baseline()
    del buffer
    assert peak >= 15 * 2**20


def _run_quick(name, *args, env=None):
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO_ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_pretrain_throughput_quick_prints_loop_and_bare_ratios(tmp_path):
    jax = importlib.util.find_spec("jax") is not None
    stdout = _run_quick(
        "pretrain_throughput.py",
        "--quick",
        "--configs",
        "pretrain/configs/tiny.json",
        "--xla",
        "off",
        "--backends",
        "tensorflow,jax" if jax else "tensorflow",
        env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    assert not list(tmp_path.glob("pretrain_throughput_*")), "the workers' synthetic data is left behind"
    tables = stdout.split("\n\n")
    pretraining = _table_rows(next(t for t in tables if "loop / bare" in t))
    assert [row["variant"] for row in pretraining] == ["loop, xla off"] + (["jax loop (jit)"] if jax else [])
    assert all(float(row["loop / bare (same XLA)"]) > 0 for row in pretraining)
    if jax:
        backends = _table_rows(next(t for t in tables if "JAX / TensorFlow" in t))
        assert [(row["JAX"], row["TensorFlow"]) for row in backends] == [
            ("jax bare (jit)", "bare, xla off"),
            ("jax loop (jit)", "loop, xla off"),
        ]
        assert all(float(row["JAX / TensorFlow"]) > 0 for row in backends)
    finetuning = _table_rows(next(t for t in tables if "fit / bare" in t))
    assert [row["variant"] for row in finetuning] == ["fit, xla off"] and float(finetuning[0]["s/step"]) > 0


def test_recompute_memory_quick_prints_both_variants():
    rows = _table_rows(_run_quick("recompute_memory.py", "--quick", "--models", "gau_alpha"))
    assert [row["model"] for row in rows] == ["GAU-α"]
    assert float(rows[0]["activation MiB"]) > 0 and float(rows[0]["activation MiB recompute"]) > 0


def test_mlm_quality_reports_the_probes(tmp_path):
    stdout = _run_quick("mlm_quality.py", "--json", str(tmp_path / "q.json"))
    row = next(r for r in _table_rows(stdout) if r["measure"].startswith("probes"))
    figures = json.loads((tmp_path / "q.json").read_text())
    assert figures["probes"]["total"] >= 20 and row["value"].startswith(f"{figures['probes']['hits']}/")


def test_encoders_quick_run_prints_every_model_against_bert():
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "encoders.py"), "--quick", "--modes", "train"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    rows = {row["model"]: row for row in _table_rows(result.stdout)}
    assert {"GAU-α", "RoFormerV2", "RoFormer", "BERT"} <= set(rows)
    assert float(rows["BERT"]["time / BERT"]) == 1.0
    for row in rows.values():
        assert row["batch×L"] == "2×32" and float(row["ms"]) > 0 and float(row["peak MiB"]) > 0, row
    bad = subprocess.run(
        [sys.executable, str(BENCHMARKS / "encoders.py"), "--shapes", "8x"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert bad.returncode != 0 and "--shapes" in bad.stderr


def test_hf_parity_prints_a_row_per_architecture():
    rows = _table_rows(_run_quick("hf_parity.py", "--archs", "gau_alpha"))
    assert [row["architecture"] for row in rows] == ["gau_alpha"]
    assert all(0 <= float(value) < 1e-4 for key, value in rows[0].items() if key != "architecture"), rows
