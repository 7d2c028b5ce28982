"""gau_keras.errors: one home for the project's errors, raised by library code and turned into an
exit status only by a command's ``main()``."""

import ast
import importlib
import inspect

import pytest

from gau_keras import errors
from tests.conftest import REPO_ROOT

#: where each error lived before gau_keras.errors (those imports keep working)
OLD_HOMES = {
    "ConfigError": ("gau_keras.models.config",),
    "RunDirError": ("gau_keras.training.run_dir",),
    "DataFileError": ("gau_keras.data.clue.readers", "gau_keras.data.clue"),
    "CheckpointError": ("gau_keras.checkpoints",),
}


def error_classes():
    return [cls for _, cls in inspect.getmembers(errors, inspect.isclass) if cls.__module__ == errors.__name__]


@pytest.mark.parametrize("name,module", [(n, m) for n, homes in OLD_HOMES.items() for m in homes])
def test_an_error_imported_from_its_old_home_is_the_same_class(name, module):
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_every_error_is_a_project_error_and_still_the_builtin_it_was():
    classes = error_classes()
    assert {
        "GauKerasError",
        "ConfigError",
        "RunDirError",
        "DataFileError",
        "CheckpointError",
        "OutputDirError",
        "DeviceError",
        "OptionError",
    } <= {cls.__name__ for cls in classes}
    for cls in classes:
        assert issubclass(cls, errors.GauKerasError) and cls.__doc__, cls
        if cls is not errors.GauKerasError:
            assert issubclass(cls, ValueError), f"{cls.__name__}: `except ValueError` no longer catches it"
    assert issubclass(errors.RunDirError, errors.OutputDirError)
    with pytest.raises(ValueError, match="data.batch_size"):
        raise errors.ConfigError("data.batch_size=3 is not divisible by the 2 replicas")


def test_the_errors_module_imports_nothing_of_gau_keras():
    tree = ast.parse((REPO_ROOT / "gau_keras" / "errors.py").read_text(encoding="utf-8"))
    imported = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert imported == []


def _raises_of_system_exit(tree):
    """``(line, enclosing function's name or None)`` of every ``raise SystemExit...`` in ``tree``."""
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                raised = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(raised, ast.Name) and raised.id == "SystemExit":
                    found.append((child.lineno, function))
            visit(child, function)

    visit(tree, None)
    return found


def test_only_a_commands_main_raises_system_exit():
    outside = []
    for path in sorted((REPO_ROOT / "gau_keras").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        outside += [
            f"{path.relative_to(REPO_ROOT)}:{line} (in {function})"
            for line, function in _raises_of_system_exit(tree)
            if function != "main"
        ]
    assert outside == [], "library code raises a typed error (gau_keras.errors); main() turns it into an exit"


def test_the_system_exit_finder_sees_raises_in_and_out_of_main():
    tree = ast.parse("def main():\n    raise SystemExit('x')\n\ndef f():\n    if 1:\n        raise SystemExit\n")
    assert _raises_of_system_exit(tree) == [(2, "main"), (6, "f")]
