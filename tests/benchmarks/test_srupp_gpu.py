"""benchmarks/srupp_gpu.py: its options and its table (its run: tests/test_without_tensorflow.py, on a
process without TensorFlow; no timing is asserted anywhere)."""

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, load_benchmark

SCRIPT = REPO_ROOT / "benchmarks" / "srupp_gpu.py"


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--shapes", "8x512x512"], "--shapes"),
        (["--dtypes", "float16"], "--dtypes"),
        (["--blocks", "48"], "--blocks"),
        (["--lookaheads", "0"], "--lookaheads"),
        (["--rounds", "0"], "--rounds"),
    ],
)
def test_bad_options_are_refused_by_name(argv, flag):
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    assert run.returncode == 2 and flag in run.stderr, run.stderr


def test_table_gives_ratios_to_scan_gru_and_the_official_kernel():
    bench = load_benchmark("srupp_gpu")
    shape = [8, 512, 512, 128]
    records = [
        dict(group="train", shape=shape, dtype="float32", variant=v, ms=ms)
        for v, ms in (
            ("official SRU++", 4.0),
            ("cuDNN GRU", 30.0),
            ("SRU++ kernel", 5.0),
            ("SRU++ scan", 40.0),
            ("Keras GRU", 25.0),
        )
    ]
    records += [dict(group="train", shape=shape, dtype="bfloat16", variant="SRU++ kernel", ms=3.0)]
    rows = {
        (line.split("|")[2].strip(), line.split("|")[4].strip()): [c.strip() for c in line.split("|")[5:9]]
        for line in bench.table(records).splitlines()[2:]
    }
    assert rows[("float32", "SRU++ kernel")] == ["5", "0.125", "0.2", "1.25"]
    # bfloat16 rows are compared with the float32 GRU and official kernel of the same shape
    assert rows[("bfloat16", "SRU++ kernel")] == ["3", "", "0.12", "0.75"]
