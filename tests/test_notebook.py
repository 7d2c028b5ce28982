"""notebooks/quickstart.ipynb runs: its code cells are executed in order, from notebooks/."""

import json

import pytest

from tests.conftest import REPO_ROOT

NOTEBOOK = REPO_ROOT / "notebooks" / "quickstart.ipynb"


def _code_cells(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return [
        ("".join(cell["source"]), index) for index, cell in enumerate(notebook["cells"]) if cell["cell_type"] == "code"
    ]


def test_notebook_is_clean_json_with_code():
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert len(cells) >= 5
    assert all(not c["outputs"] and c["execution_count"] is None for c in cells), "commit the notebook without outputs"


def test_quickstart_runs_in_order(shared_data, monkeypatch, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (requirements.txt) draws the notebook's plot")
    monkeypatch.chdir(NOTEBOOK.parent)
    monkeypatch.setenv("CLUE_DIR", str(shared_data / "clue"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    namespace = {"__name__": "__quickstart__"}
    for source, index in _code_cells(NOTEBOOK):
        exec(compile(source, f"{NOTEBOOK.name}[cell {index}]", "exec"), namespace)
    history = namespace["history"].history["loss"]
    assert len(history) == 4 and all(v == v for v in history)  # no NaN
    assert namespace["features"].shape[0] == 4
    plot = namespace["PLOT_PATH"]
    assert plot.startswith(str(tmp_path)) and (tmp_path / "gau_keras_quickstart.png").stat().st_size > 0
