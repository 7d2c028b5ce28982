"""No registered gau_keras layer or Backbone skips the harness (tests/harness.py).

The registry is Keras's (every class registered under ``gau_keras>``); the tests are read as
source: a class counts when a ``test_*`` function of a ``test_*.py`` file under tests/ calls
``run_layer_test(<the class>, ...)`` or ``run_backbone_test(<the class>, ...)`` with the class
itself as first argument (a name or ``module.Name``; a variable there does not count).
"""

import ast

import keras

import gau_keras  # noqa: F401 - registers every class
from gau_keras.registration import PACKAGE
from tests.conftest import REPO_ROOT

#: an abstract registered class -> the concrete test subclass that stands in for it
STAND_INS = {"Loss": "MeanLoss"}
#: the prefix of a Backbone's Keras 2 face class (gau_keras.bert4keras.model.keras2_class), which
#: run_backbone_test of the Backbone reloads too
FACE = "Keras2"


def registered(base):
    """{name: class} of the classes registered under gau_keras that subclass ``base``."""
    return {
        name.split(">", 1)[1]: obj
        for name, obj in keras.saving.get_custom_objects().items()
        if name.startswith(f"{PACKAGE}>") and isinstance(obj, type) and issubclass(obj, base)
    }


def registered_layers():
    return {name for name, cls in registered(keras.layers.Layer).items() if not issubclass(cls, keras.Model)}


def registered_backbones():
    return {name for name in registered(keras.Model) if name.endswith("Backbone")}


def harnessed(function):
    """{class name passed as first argument to ``function`` by a test function under tests/}."""
    names = set()
    for path in (REPO_ROOT / "tests").rglob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tests = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]
        for test in tests:
            for call in ast.walk(test):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == function
                    and call.args
                ):
                    first = call.args[0]
                    if isinstance(first, ast.Name):
                        names.add(first.id)
                    elif isinstance(first, ast.Attribute):
                        names.add(first.attr)
    return names


def test_every_registered_layer_goes_through_run_layer_test():
    layers = registered_layers()
    assert len(layers) >= 30, sorted(layers)
    covered = harnessed("run_layer_test")
    missing = sorted(name for name in layers if STAND_INS.get(name, name) not in covered)
    assert not missing, f"registered layers no test passes to run_layer_test (tests/harness.py): {missing}"


def test_every_registered_backbone_goes_through_run_backbone_test():
    backbones = registered_backbones()
    assert len(backbones) >= 9, sorted(backbones)
    covered = harnessed("run_backbone_test")
    missing = sorted(name for name in backbones if name.removeprefix(FACE) not in covered)
    assert not missing, f"registered Backbones no test passes to run_backbone_test (tests/harness.py): {missing}"
