"""Every fine-tuning task by name: the rows of `gau_keras.data.clue.TASKS` that
have a head kind. A row's head kind picks its `Task` class:

    gau-keras finetune <name> --data-dir ... ; python -m finetune <name> --data-dir ...

Adding a task of an existing form and head is one row of that registry.
"""

import importlib

from gau_keras.data.clue import TASKS

#: head kind -> (module, class) of its Task; classification has one class per input form
HEADS = {
    "classification": ("gau_keras.training.finetune.classification", None),
    "span": ("gau_keras.training.finetune.cmrc2018", "Cmrc2018Task"),
    "multiple_choice": ("gau_keras.training.finetune.c3", "C3Task"),
    "candidates": ("gau_keras.training.finetune.chid", "ChidTask"),
    "global_pointer": ("gau_keras.training.finetune.cluener", "ClueNerTask"),
}


def names():
    """Every fine-tuning task's name, sorted."""
    return sorted(name for name, spec in TASKS.items() if spec.head is not None)


def spec_of(name):
    """The `TaskSpec` of a fine-tuning task; a ValueError names the known ones."""
    spec = TASKS.get(str(name).lower())
    if spec is None or spec.head is None:
        raise ValueError(f"unknown fine-tuning task {name!r}; known: {', '.join(names())}")
    return spec


def task_class(name):
    """The `Task` class that runs the task ``name``."""
    spec = spec_of(name)
    module_name, class_name = HEADS[spec.head]
    module = importlib.import_module(module_name)
    return module.FORMS[spec.form] if class_name is None else getattr(module, class_name)


def same_model(name):
    """``name`` and the other tasks its class runs (the ``--task-name`` choices of its command)."""
    spec = spec_of(name)
    return (spec.name,) + tuple(n for n in task_class(name).task_names() if n != spec.name)
