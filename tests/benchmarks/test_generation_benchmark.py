"""Smoke test of benchmarks/generation.py: its main in --quick mode (tiny models, 8 new
tokens). No timing is asserted: the table must have its columns, every run must have produced
the asked number of ids (the script checks), and cached and recompute greedy ids must be equal.
"""

import pytest

from tests.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("generation")


def _table(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    assert len(lines) >= 3, f"no Markdown table in the output:\n{stdout}"
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return header, [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_quick_run_prints_cached_recompute_and_keras_hub_columns(bench, capsys):
    bench.main(["--quick"])
    out = capsys.readouterr().out
    header, rows = _table(out)
    assert header == bench.HEADERS
    assert [(row["model"], row["mode"], row["new tokens"]) for row in rows] == [
        ("gpt2", "greedy", "8"),
        ("gau_alpha", "greedy", "8"),
    ]
    for row in rows:
        assert row["ids equal"] == "yes", row  # the same greedy ids, cached and recomputed
        for column in ("cached ms/token", "cached tokens/s", "recompute ms/token", "cached speedup"):
            assert float(row[column]) > 0, (column, row)
    if "keras-hub column skipped" in out:  # keras_hub absent: said why, column marked
        assert rows[0]["keras-hub tokens/s"] == "not measured"
    else:
        assert float(rows[0]["keras-hub tokens/s"]) > 0
    assert rows[1]["keras-hub tokens/s"] == "n/a"  # no keras-hub GAU-alpha


def test_recompute_estimate_is_a_least_squares_line(bench):
    assert bench.estimate([(10, 1.0), (20, 2.0)], 40) == pytest.approx(4.0)
    assert bench.estimate([(10, 1.0)], 40) is None


def test_recompute_lengths_choose_where_recompute_runs(bench):
    args = bench.parse_args(["--lengths", "256,64", "--recompute-lengths", "64"])
    assert args.lengths == [64, 256] and args.recompute_lengths == [64]
    assert bench.parse_args(["--recompute-lengths", "none"]).recompute_lengths == []
    with pytest.raises(SystemExit):
        bench.parse_args(["--models", "bert"])
