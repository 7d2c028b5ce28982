"""Smoke test of benchmarks/srupp_speed.py on tiny shapes: every table is printed
with positive numbers (no timing is asserted)."""

import re
import subprocess
import sys

from gau_keras.recurrence.tensorflow import native as kernels
from tests.conftest import REPO_ROOT


def _native_builds():
    try:
        kernels.load()
        return True
    except kernels.KernelUnavailable:
        return False


def test_all_tables_on_tiny_shapes():
    """Both implementations where the native kernel builds, else the XLA loops alone."""
    native = _native_builds()
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "srupp_speed.py"),
            "--lengths",
            "16",
            "--batch",
            "2",
            "--hidden",
            "8",
            "--proj",
            "4",
            "--step-length",
            "16",
            "--repeats",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    rows = [line.split() for line in out.splitlines() if re.match(r"\s*16 \|", line)]
    assert [row[0] for row in rows] == ["16"]
    numbers = [float(cell) for row in rows for cell in row[1:] if re.fullmatch(r"[0-9.]+", cell)]
    assert len(numbers) == (10 if native else 6) and all(n > 0 for n in numbers)
    shares = re.findall(
        r"(native|xla): training step ([0-9.]+) ms; .* share ([0-9.]+)%; "
        r"in-step trace share ([0-9.]+)%",
        out,
    )
    assert [s[0] for s in shares] == (["native", "xla"] if native else ["xla"])
    assert all(float(s[1]) > 0 for s in shares)
    # the trace found the recurrence's ops inside the step (a share of 0 would mean it missed them)
    assert all(0 < float(s[3]) < 100 for s in shares), out
    assert re.search(r"GRU\s+[0-9.]+\s+[0-9.]+", out) and re.search(r"LSTM\s+[0-9.]+\s+[0-9.]+", out)
