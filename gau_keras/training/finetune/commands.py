"""Every fine-tuning command by name: the rows of the classification table and
the modules of the other task forms.

    gau-keras finetune <name> --data-dir ... ; python -m finetune.<name> where a module exists

A classification row needs no module of its own (``task_for`` builds its
class from the table); the modules ``finetune/tnews.py`` ... exist for
``python -m finetune.<name>`` and their command-line help.
"""
import importlib
import importlib.util

from gau_keras.training.finetune.classification import CLASSIFICATION, classification_task

#: the commands of the other forms: span extraction, multiple choice, idiom cloze, NER
TASK_MODULES = ("cmrc2018", "c3", "chid", "cluener")


def names():
    """Every command name."""
    return sorted(set(CLASSIFICATION) | set(TASK_MODULES))


def task_for(name):
    """The `Task` class of a command: its module's when it has one, else built from its table row."""
    if name not in names():
        raise ValueError(f"unknown fine-tuning task {name!r}; known: {', '.join(names())}")
    if importlib.util.find_spec(f"gau_keras.training.finetune.{name}") is not None:
        from gau_keras.training.finetune.runner import task_class

        return task_class(f"gau_keras.training.finetune.{name}")
    return classification_task(name, __name__)
