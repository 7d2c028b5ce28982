"""gau_keras.cli_env and the environment switches: each variable is read or written in one module."""

import ast
import os

import pytest

from gau_keras import cli_env
from tests.conftest import REPO_ROOT

#: the folders of Python the project runs (library, scripts, benchmarks, examples)
SOURCE_FOLDERS = ("gau_keras", "finetune", "pretrain", "benchmarks", "examples")
#: each environment switch -> the one module that reads or sets it
SWITCH_HOMES = {
    "TF_CPP_MIN_LOG_LEVEL": "gau_keras/cli_env.py",
    "GAU_KERAS_SRU_KERNEL": "gau_keras/recurrence/switches.py",
    "GAU_KERAS_SRU_XLA": "gau_keras/recurrence/switches.py",
    "GAU_KERAS_KERNEL_CACHE": "gau_keras/recurrence/switches.py",
}


def names_used(tree, names):
    """The ``names`` a module's code uses as a string of its own (``os.environ["X"]``, ``X = "X"``)
    or as a keyword (``dict(os.environ, X="1")``); a docstring mentioning one does not count."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in names:
            found.add(node.value)
        elif isinstance(node, ast.keyword) and node.arg in names:
            found.add(node.arg)
    return found


def test_each_switch_is_read_or_written_in_one_module():
    users = {name: [] for name in SWITCH_HOMES}
    for folder in SOURCE_FOLDERS:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for name in names_used(tree, set(SWITCH_HOMES)):
                users[name].append(path.relative_to(REPO_ROOT).as_posix())
    assert users == {name: [home] for name, home in SWITCH_HOMES.items()}


def test_the_finder_sees_strings_and_keywords_but_not_docstrings():
    tree = ast.parse(
        '"""TF_CPP_MIN_LOG_LEVEL in a docstring"""\nimport os\n'
        'os.environ["GAU_KERAS_SRU_XLA"]\ndict(GAU_KERAS_KERNEL_CACHE="x")\n'
    )
    assert names_used(tree, set(SWITCH_HOMES)) == {"GAU_KERAS_SRU_XLA", "GAU_KERAS_KERNEL_CACHE"}


def test_default_tf_log_level_keeps_the_users_setting(monkeypatch):
    monkeypatch.delenv(cli_env.TF_LOG_LEVEL, raising=False)
    cli_env.default_tf_log_level()
    assert os.environ[cli_env.TF_LOG_LEVEL] == cli_env.SCRIPT_TF_LOG_LEVEL
    monkeypatch.setenv(cli_env.TF_LOG_LEVEL, "0")
    cli_env.default_tf_log_level(cli_env.CLI_TF_LOG_LEVEL)
    assert os.environ[cli_env.TF_LOG_LEVEL] == "0"


@pytest.mark.parametrize(
    "script,expected",
    [
        ("pretrain/pretrain.py", True),
        ("finetune/__main__.py", True),
        ("benchmarks/srupp_jax.py", True),
        ("gau_keras/__main__.py", False),
        ("tests/conftest.py", False),
    ],
)
def test_the_checkout_scripts_are_told_by_their_folder(script, expected, tmp_path):
    assert cli_env.is_checkout_script(str(REPO_ROOT / script)) is expected
    assert not cli_env.is_checkout_script(str(tmp_path / script))  # another folder of that name
    assert not cli_env.is_checkout_script()  # pytest's own __main__


@pytest.mark.parametrize(
    "script,command_line,level", [(True, False, cli_env.SCRIPT_TF_LOG_LEVEL), (False, False, None)]
)
def test_importing_gau_keras_sets_a_scripts_log_level_and_leaves_a_library_user_alone(
    script, command_line, level, monkeypatch
):
    monkeypatch.delenv(cli_env.TF_LOG_LEVEL, raising=False)
    monkeypatch.setattr(cli_env, "is_checkout_script", lambda: script)
    monkeypatch.setattr(cli_env, "is_command_line", lambda: command_line)
    cli_env.quiet_tensorflow()
    assert os.environ.get(cli_env.TF_LOG_LEVEL) == level
