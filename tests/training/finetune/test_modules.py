"""The fine-tuning runner split by job: options, out_dir, callbacks, training; runner is the command
and keeps every name importable from it."""

import ast

from gau_keras.training.finetune import callbacks, options, out_dir, runner, training
from tests.conftest import REPO_ROOT

FINETUNE = REPO_ROOT / "gau_keras" / "training" / "finetune"


def test_the_runner_keeps_each_name_from_the_module_that_does_that_job():
    homes = {
        "Options": options,
        "build_parser": options,
        "parse_options": options,
        "TASK_DEFAULTS": options,
        "output_paths": out_dir,
        "check_outputs": out_dir,
        "lock_out_dir": out_dir,
        "train_and_predict": training,
        "load_split": training,
        "make_optimizer": training,
        "DEV_SUBSET_SEED": training,
    }
    for name, module in homes.items():
        assert getattr(runner, name) is getattr(module, name), name
    assert all(hasattr(runner, name) for name in runner.__all__)
    assert callable(runner.main) and runner.main.__module__ == runner.__name__


def test_no_class_or_callback_is_defined_inside_a_function_of_the_runner():
    nested = []
    for path in (FINETUNE / f"{name}.py" for name in ("runner", "options", "out_dir", "callbacks", "training")):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested += [
                    f"{path.name}:{node.lineno} {node.name} in {function.name}"
                    for node in ast.walk(function)
                    if node is not function and isinstance(node, (ast.ClassDef, ast.FunctionDef))
                ]
    assert nested == []


def test_the_callbacks_are_keras_callbacks_at_module_level():
    import keras

    for cls in (callbacks.TqdmProgress, callbacks.DevEvaluation):
        assert issubclass(cls, keras.callbacks.Callback) and cls.__qualname__ == cls.__name__
