"""The ``gau-keras`` command line and the installed package: every subcommand
answers, and the apps (gau_keras.training) import without sys.path edits."""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from gau_keras import __main__ as cli
from tests.conftest import REPO_ROOT


def _run(argv, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["pretrain", "--help"], "--config"),
        (["prepare-corpus", "--help"], "--output-dir"),
        (["build-vocab", "--help"], "--base-vocab"),
        (["finetune", "tnews", "--help"], "--data-dir"),
        (["finetune", "eprstmt", "--help"], "--data-dir"),
        (["compare", "--help"], "--variant"),
        (["export", "--help"], "--keras"),
        (["fill-mask", "--help"], "--top-k"),
    ],
)
def test_every_subcommand_answers(capsys, argv, expected):
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 0 and expected in capsys.readouterr().out


def test_help_lists_every_subcommand_one_line_each(capsys):
    """``gau-keras --help`` names every subcommand (the delegated ones too) with its line of help."""
    import re

    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    out = capsys.readouterr().out
    commands = ["fill-mask", "export", "prepare-corpus", "build-vocab", "pretrain", "finetune", "compare"]
    assert done.value.code == 0 and set(cli.DELEGATED) <= set(commands)
    for command in commands:
        assert re.search(rf"^  {command} +\S", out, re.M), (command, out)


def test_finetune_needs_a_known_task(capsys):
    assert cli.main(["finetune", "nosuchtask"]) == 2
    assert "tnews" in capsys.readouterr().err
    assert cli.main(["finetune", "--help"]) == 0  # the tasks of gau_keras.data.clue.TASKS with a head
    assert "cluener" in capsys.readouterr().out


def test_console_script_and_packages_outside_the_checkout(tmp_path):
    script = shutil.which("gau-keras")
    if script is None:
        pytest.skip("the gau-keras console script is not on PATH (pip install -e . installs it)")
    where = _run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('gau_keras').origin)"], tmp_path)
    if pathlib.Path(where.stdout.strip()).resolve().parents[1] != REPO_ROOT.resolve():
        pytest.skip(f"the installed gau_keras is another checkout's ({where.stdout.strip()})")
    result = _run([script, "finetune", "chid", "--help"], tmp_path)
    assert result.returncode == 0 and "--data-dir" in result.stdout
    code = (
        "import gau_keras.training.pretrain.trainer, gau_keras.training.run_dir, "
        "gau_keras.training.finetune.runner, gau_keras.training.finetune.cluener; print('ok')"
    )
    result = _run([sys.executable, "-c", code], tmp_path)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]


def _parsers():
    """(command, parser) of every gau-keras command that takes numeric flags."""
    from gau_keras.training.finetune import compare, tasks
    from gau_keras.training.finetune.runner import build_parser
    from gau_keras.training.pretrain import prepare_corpus, pretrain

    main = cli.build_parser()
    subcommands = next(a for a in main._actions if isinstance(a, argparse._SubParsersAction)).choices
    found = [(f"gau-keras {name}", parser) for name, parser in subcommands.items()]
    found += [
        ("prepare-corpus", _parser_of(prepare_corpus.parse_args)),
        ("pretrain", _parser_of(pretrain.parse_args)),
        ("compare", compare.build_parser()),
    ]
    found += [(f"finetune {name}", build_parser(name)) for name in tasks.names()]
    return found


def _parser_of(parse_args):
    """The ArgumentParser a module's ``parse_args(argv)`` builds (caught as it parses)."""
    seen = []
    original = argparse.ArgumentParser.parse_args

    def catch(self, *args, **kwargs):
        seen.append(self)
        raise _Caught

    argparse.ArgumentParser.parse_args = catch
    try:
        parse_args([])
    except _Caught:
        pass
    finally:
        argparse.ArgumentParser.parse_args = original
    return seen[0]


class _Caught(Exception):
    pass


#: numeric flags that take any integer
ANY_INTEGER = {"--seed"}


def test_every_numeric_flag_of_every_command_refuses_bad_values(capsys):
    from gau_keras import flags

    checked = 0
    for command, parser in _parsers():
        for action in parser._actions:
            numeric = action.type in (int, float) or getattr(action.type, "__module__", None) == flags.__name__
            if not numeric or not action.option_strings:
                continue
            flag = action.option_strings[0]
            if action.type in (int, float):  # a plain int/float takes 0, -1, nan ...: only where any value is fine
                assert flag in ANY_INTEGER and action.type is int, f"{command} {flag}: its values are not checked"
                bad = ("x", "1.5")
            else:
                bad = action.type.bad
            for value in bad:
                with pytest.raises(SystemExit) as stopped:
                    parser.parse_args([flag, value])
                err = capsys.readouterr().err
                assert stopped.value.code == 2 and f"argument {flag}" in err, (command, flag, value, err)
                assert "Traceback" not in err
                checked += 1
    assert checked > 150  # every finetune task's --lr, --epochs ..., pretrain's, prepare-corpus's, fill-mask's


def test_a_command_that_stops_on_a_bad_path_says_one_line_with_status_2(tmp_path, capsys):
    missing = tmp_path / "none.json"
    assert cli.main(["pretrain", "--config", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read config {str(missing)!r}") and err.count("\n") == 1
    assert (
        cli.main(["compare", "--data-dir", "x", "--out-dir", str(tmp_path), "--variant", "a=", "--tasks", "nosuch"])
        == 2
    )


def test_fill_mask_with_a_model_without_an_mlm_head_says_which_have_one(capsys):
    """ELECTRA's checkpoints hold a discriminator: one line naming the models that can fill a mask."""
    assert cli.main(["fill-mask", "--model", "electra", "今天天气很[MASK]。"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: fill-mask: --model electra has no MLM head") and err.count("\n") == 1
    assert "gau_alpha" in err and "bert" in err
    assert cli.main(["fill-mask", "--model", "gpt2", "今天天气很[MASK]。"]) == 2  # a left-to-right LM
    err = capsys.readouterr().err
    assert err.startswith("error: fill-mask: --model gpt2 has no MLM head") and "gpt2_ml" not in err
