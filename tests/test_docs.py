"""Every design-note reference in the code and the READMEs resolves to a file of docs/."""
import re

from tests.conftest import REPO_ROOT

SOURCES = ("gau_keras", "pretrain", "finetune", "benchmarks", "examples", "tests", "docs")


def _files():
    for folder in SOURCES:
        for path in (REPO_ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".cc") and "__pycache__" not in path.parts:
                yield path
    yield REPO_ROOT / "README.md"


def test_design_note_references_resolve():
    missing, outside = [], []
    for path in _files():
        text = path.read_text(encoding="utf-8")
        for reference in re.findall(r"docs/[\w./-]+\.md", text):
            if not (REPO_ROOT / reference).is_file():
                missing.append(f"{path.relative_to(REPO_ROOT)}: {reference}")
        if "DESIGN.md" in text and path.name != "test_docs.py":
            outside.append(str(path.relative_to(REPO_ROOT)))
    assert not missing, missing
    assert not outside, f"references to a design file outside the repository: {outside}"
    for link in re.findall(r"\]\(([\w./-]+\.md)\)", (REPO_ROOT / "docs" / "README.md").read_text()):
        assert (REPO_ROOT / "docs" / link).is_file(), link
