"""The code passes the project's linter configuration (ruff.toml): pyflakes,
pycodestyle, import order, bugbear and pyupgrade rules."""
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def test_ruff_check_passes():
    command = [shutil.which("ruff")] if shutil.which("ruff") else [sys.executable, "-m", "ruff"]
    probe = subprocess.run(command + ["--version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("ruff is not installed (pip install -r requirements.txt installs it)")
    result = subprocess.run(command + ["check", "--output-format", "concise", "."], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
