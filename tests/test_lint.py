"""The code passes the project's linter configuration (ruff.toml): pyflakes,
pycodestyle, import order, bugbear and pyupgrade rules, and is as `ruff format` writes it."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def _ruff(*arguments):
    """``ruff ARGUMENTS`` run on the checkout; skips the test where ruff is not installed."""
    command = [shutil.which("ruff")] if shutil.which("ruff") else [sys.executable, "-m", "ruff"]
    probe = subprocess.run(command + ["--version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("ruff is not installed (pip install -r requirements.txt installs it)")
    return subprocess.run(command + list(arguments), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_check_passes():
    result = _ruff("check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_format_would_change_nothing():
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, "run `ruff format .`: " + result.stdout[-4000:] + result.stderr[-2000:]
