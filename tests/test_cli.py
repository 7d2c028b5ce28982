"""The ``gau-keras`` command line and the installed packages: every subcommand
answers, and pretrain/finetune import without sys.path edits."""
import os
import shutil
import subprocess
import sys

import pytest

from gau_keras import __main__ as cli


def _run(argv, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("argv, expected", [
    (["pretrain", "--help"], "--config"),
    (["prepare-corpus", "--help"], "--output-dir"),
    (["finetune", "tnews", "--help"], "--data-dir"),
    (["finetune", "eprstmt", "--help"], "--data-dir"),      # a table row without a module
    (["compare", "--help"], "--variant"),
    (["export", "--help"], "--keras"),
    (["fill-mask", "--help"], "--top-k"),
])
def test_every_subcommand_answers(capsys, argv, expected):
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 0 and expected in capsys.readouterr().out


def test_finetune_needs_a_known_task(capsys):
    assert cli.main(["finetune", "nosuchtask"]) == 2
    assert "tnews" in capsys.readouterr().err


def test_console_script_and_packages_outside_the_checkout(tmp_path):
    script = shutil.which("gau-keras")
    if script is None:
        pytest.skip("the gau-keras console script is not on PATH (pip install -e . installs it)")
    result = _run([script, "finetune", "chid", "--help"], tmp_path)
    assert result.returncode == 0 and "--data-dir" in result.stdout
    code = "import pretrain.trainer, pretrain.run_dir, finetune.runner, finetune.cluener; print('ok')"
    result = _run([sys.executable, "-c", code], tmp_path)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]
