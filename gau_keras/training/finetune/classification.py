"""The CLUE classification tasks as one table.

Every task of the forms text, pair, keywords and wsc (``gau_keras.data.clue``)
is classified from the [CLS] vector of one text or a text pair. ``FORM_TEXTS``
says how an example of each form becomes those texts; ``CLASSIFICATION`` has
one row per command ``python -m finetune.<command>``: the task names it runs
(``--task-name``), its command-line defaults, the small budget of
``finetune.compare`` and the input it builds. ``classification_task`` makes the
`Task` class of a row; the modules ``finetune/tnews.py`` ... are that class
and their command-line help. Adding a classification task of an existing form
is one ``TaskSpec`` in ``gau_keras/data/clue/tasks.py`` and one row here
(finetune/README.md, "Adding a task").
"""
from dataclasses import dataclass, field
from typing import Tuple

from gau_keras.training.finetune.task import ClassificationTask

#: what joins csl's keywords into the first text
KEYWORD_SEPARATOR = "；"
#: the marks around wsc's span 1 (the candidate referent) and span 2 (the pronoun)
SPAN1_MARKS = ("<", ">")
SPAN2_MARKS = ("[", "]")


def mark_spans(text, span1, span2):
    """``text`` with span1 in SPAN1_MARKS and span2 in SPAN2_MARKS (spans: (index, text)).

    Marks are placed left to right by position; at one position closing marks
    come first (the inner span's first), then opening marks (the outer span's
    first), so overlapping or equal spans still nest properly.
    """
    marks = []
    for k, (span, (left, right)) in enumerate(((span1, SPAN1_MARKS), (span2, SPAN2_MARKS)), start=1):
        start, end = span.index, span.index + len(span.text)
        marks.append(((start, 1, -end, k), left))
        marks.append(((end, 0, -start, -k), right))
    pieces, cursor = [], 0
    for (position, *_), mark in sorted(marks):
        pieces += [text[cursor:position], mark]
        cursor = position
    return "".join(pieces) + text[cursor:]


#: form -> (first text, second text or None) of an example
FORM_TEXTS = {
    "text": lambda e: (e.text, None),
    "pair": lambda e: (e.text_a, e.text_b),
    "keywords": lambda e: (KEYWORD_SEPARATOR.join(e.keywords), e.abstract),
    "wsc": lambda e: (mark_spans(e.text, e.span1, e.span2), None),
}


@dataclass(frozen=True)
class Classification:
    """One classification command: ``python -m finetune.<command>``.

    task_names: the ``--task-name`` choices (the first is the default), all of one form.
    defaults: epochs, batch_size, maxlen, lr of the command line.
    budget: what ``finetune.compare`` overrides for its small CPU protocol.
    input: the class docstring: what the encoder sees and the labels.
    """
    command: str
    task_names: Tuple[str, ...]
    defaults: dict
    budget: dict = field(default_factory=dict)
    input: str = ""


CLASSIFICATION = {row.command: row for row in (
    Classification("tnews", ("tnews",), dict(epochs=3, batch_size=32, maxlen=64, lr=5e-5),
                   dict(epochs=10), 'Input: ``[CLS] title [SEP]``; label: the tnews code ("100".."116").'),
    Classification("iflytek", ("iflytek",), dict(epochs=3, batch_size=16, maxlen=256, lr=5e-5),
                   dict(epochs=8, maxlen=128, batch_size=32),
                   'Input: ``[CLS] description [SEP]`` (long descriptions are cut at --maxlen); label "0".."118".'),
    Classification("afqmc", ("afqmc", "bustm"), dict(epochs=3, batch_size=32, maxlen=128, lr=5e-5),
                   dict(epochs=15, maxlen=64, batch_size=16),
                   'Input: ``[CLS] sentence1 [SEP] sentence2 [SEP]``; label "0"/"1".'),
    Classification("cmnli", ("cmnli",), dict(epochs=2, batch_size=32, maxlen=128, lr=5e-5), {},
                   "Input: ``[CLS] premise [SEP] hypothesis [SEP]``; labels contradiction/entailment/neutral."),
    Classification("ocnli", ("ocnli", "ocnli_full"), dict(epochs=3, batch_size=32, maxlen=128, lr=5e-5),
                   dict(epochs=6, maxlen=64, max_train_examples=3000, max_eval_examples=1000),
                   "Input: ``[CLS] premise [SEP] hypothesis [SEP]``; labels contradiction/entailment/neutral."),
    Classification("csl", ("csl",), dict(epochs=3, batch_size=16, maxlen=256, lr=5e-5),
                   dict(epochs=10, maxlen=128),
                   'Input: ``[CLS] kw1；kw2；… [SEP] abstract [SEP]`` (the abstract is cut first); label "0"/"1".'),
    Classification("wsc", ("wsc", "cluewsc"), dict(epochs=5, batch_size=16, maxlen=128, lr=5e-5),
                   dict(epochs=10), 'Input: ``[CLS] marked text [SEP]``; label "true"/"false".'),
    Classification("eprstmt", ("eprstmt",), dict(epochs=5, batch_size=32, maxlen=128, lr=5e-5),
                   dict(epochs=10), 'Input: ``[CLS] review [SEP]``; label "Negative"/"Positive".'),
)}


def classification_task(command, module):
    """The `Task` class of ``CLASSIFICATION[command]``, defined as if in ``module``
    (its ``__name__``: the command's module, or ``__main__`` under ``python -m``)."""
    from gau_keras.data.clue import get_task

    row = CLASSIFICATION[command]
    forms = {get_task(name).form for name in row.task_names}
    if len(forms) != 1 or not forms <= set(FORM_TEXTS):
        raise ValueError(f"{command}: task names {row.task_names} must share one classification form, "
                         f"got {sorted(forms)}")
    texts = FORM_TEXTS[forms.pop()]
    name = "".join(part.capitalize() for part in command.split("_")) + "Task"
    return type(name, (ClassificationTask,), {
        "__module__": module, "__doc__": row.input, "task_names": row.task_names,
        "defaults": dict(row.defaults), "budget": dict(row.budget),
        "texts": lambda self, example: texts(example)})
