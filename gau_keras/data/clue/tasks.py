"""The CLUE tasks, the one registry: input form, label set and folder names of
each, and for fine-tuning its head kind, command-line defaults and the small
budget of ``gau-keras compare`` (``gau_keras.training.finetune`` reads them;
``gau-keras finetune TASK`` offers every task with a head)."""

from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

TNEWS_LABELS = (
    "100",
    "101",
    "102",
    "103",
    "104",
    "106",
    "107",
    "108",
    "109",
    "110",
    "112",
    "113",
    "114",
    "115",
    "116",
)  # 105 and 111 are unused
IFLYTEK_LABELS = tuple(str(i) for i in range(119))
NLI_LABELS = ("contradiction", "entailment", "neutral")
CLUENER_TYPES = (
    "address",
    "book",
    "company",
    "game",
    "government",
    "movie",
    "name",
    "organization",
    "position",
    "scene",
)


@dataclass(frozen=True)
class TaskSpec:
    """How to read one task.

    Attributes:
        name: the task name used by `load_task` / `write_predictions`.
        form: the record reader ("text", "pair", "keywords", "wsc", "cmrc2018",
            "c3", "chid", "cluener").
        labels: label strings as written in the data and the submission (their
            position is the label index); entity types for cluener; None when
            the label indexes choices/candidates (c3, chid) or spans (cmrc2018).
        folders: sub-folders of a data dir that may hold the task's files.
        no_label_marker: a label value meaning "annotators disagreed": such
            records are skipped and counted (the '-' of cmnli/ocnli).
        marks: fields only this task's files carry among the tasks of its
            form (tnews's label_desc, iflytek's label_des): a record holding
            another task's mark is that task's, and malformed here.
        head: the fine-tuning head kind (one of HEADS), None when not fine-tuned.
        defaults: epochs, batch_size, maxlen and lr of its fine-tuning command.
        budget: what ``gau-keras compare`` overrides for its small CPU protocol.
        about: one line for the command's help: what the model sees and predicts.
    """

    name: str
    form: str
    labels: Optional[Tuple[str, ...]] = None
    folders: Tuple[str, ...] = ()
    no_label_marker: Optional[str] = None
    marks: Tuple[str, ...] = ()
    head: Optional[str] = None
    defaults: Mapping = field(default_factory=dict, compare=False)
    budget: Mapping = field(default_factory=dict, compare=False)
    about: str = ""

    @property
    def num_labels(self):
        return None if self.labels is None else len(self.labels)


#: the fine-tuning head kinds: [CLS] classification, answer span, multiple choice over [CLS]
#: vectors, candidate scoring at [MASK]s, GlobalPointer entity spans
HEADS = ("classification", "span", "multiple_choice", "candidates", "global_pointer")


def _spec(name, form, labels=None, folders=(), head=None, defaults=None, budget=None, **kwargs):
    folders = tuple(folders) or (name,)
    if head is not None and head not in HEADS:
        raise ValueError(f"{name}: head {head!r} is not one of {HEADS}")
    return name, TaskSpec(
        name,
        form,
        labels,
        folders + tuple(f + "_public" for f in folders),
        head=head,
        defaults=dict(defaults or {}),
        budget=dict(budget or {}),
        **kwargs,
    )


def _defaults(epochs, batch_size, maxlen, lr=5e-5):
    return dict(epochs=epochs, batch_size=batch_size, maxlen=maxlen, lr=lr)


_PAIR = 'Input: ``[CLS] sentence1 [SEP] sentence2 [SEP]``; label "0"/"1".'
_NLI = "Input: ``[CLS] premise [SEP] hypothesis [SEP]``; labels contradiction/entailment/neutral."
_WSC = 'Input: ``[CLS] marked text [SEP]`` (span 1 in < >, the pronoun in [ ]); label "true"/"false".'
_OCNLI_BUDGET = dict(epochs=6, maxlen=64, max_train_examples=3000, max_eval_examples=1000)

TASKS = dict(
    [
        _spec(
            "tnews",
            "text",
            TNEWS_LABELS,
            marks=("label_desc", "keywords"),
            head="classification",
            defaults=_defaults(3, 32, 64),
            budget=dict(epochs=10),
            about='Input: ``[CLS] title [SEP]``; label: the tnews code ("100".."116").',
        ),
        _spec(
            "iflytek",
            "text",
            IFLYTEK_LABELS,
            marks=("label_des",),
            head="classification",
            defaults=_defaults(3, 16, 256),
            budget=dict(epochs=8, maxlen=128, batch_size=32),
            about='Input: ``[CLS] description [SEP]`` (long descriptions are cut at maxlen); label "0".."118".',
        ),
        _spec(
            "eprstmt",
            "text",
            ("Negative", "Positive"),
            head="classification",
            defaults=_defaults(5, 32, 128),
            budget=dict(epochs=10),
            about='Input: ``[CLS] review [SEP]``; label "Negative"/"Positive".',
        ),
        _spec(
            "afqmc",
            "pair",
            ("0", "1"),
            head="classification",
            defaults=_defaults(3, 32, 128),
            budget=dict(epochs=15, maxlen=64, batch_size=16),
            about=_PAIR,
        ),
        _spec(
            "bustm",
            "pair",
            ("0", "1"),
            head="classification",
            defaults=_defaults(3, 32, 128),
            budget=dict(epochs=15, maxlen=64, batch_size=16),
            about=_PAIR,
        ),
        _spec(
            "cmnli",
            "pair",
            NLI_LABELS,
            no_label_marker="-",
            head="classification",
            defaults=_defaults(2, 32, 128),
            about=_NLI,
        ),
        _spec(
            "ocnli",
            "pair",
            NLI_LABELS,
            no_label_marker="-",
            head="classification",
            defaults=_defaults(3, 32, 128),
            budget=_OCNLI_BUDGET,
            about=_NLI,
        ),
        _spec(
            "ocnli_full",
            "pair",
            NLI_LABELS,
            no_label_marker="-",
            head="classification",
            defaults=_defaults(3, 32, 128),
            budget=_OCNLI_BUDGET,
            about=_NLI + " 10k train examples, the full dev.",
        ),
        _spec(
            "csl",
            "keywords",
            ("0", "1"),
            head="classification",
            defaults=_defaults(3, 16, 256),
            budget=dict(epochs=10, maxlen=128),
            about='Input: ``[CLS] kw1；kw2；… [SEP] abstract [SEP]`` (the abstract is cut first); label "0"/"1".',
        ),
        _spec(
            "wsc",
            "wsc",
            ("true", "false"),
            folders=("wsc", "cluewsc", "cluewsc2020"),
            head="classification",
            defaults=_defaults(5, 16, 128),
            budget=dict(epochs=10),
            about=_WSC,
        ),
        _spec(
            "cluewsc",
            "wsc",
            ("true", "false"),
            folders=("cluewsc", "cluewsc2020", "wsc"),
            head="classification",
            defaults=_defaults(5, 16, 128),
            budget=dict(epochs=10),
            about=_WSC,
        ),
        _spec(
            "cmrc2018",
            "cmrc2018",
            head="span",
            defaults=_defaults(2, 16, 256),
            budget=dict(epochs=3, maxlen=192, max_eval_examples=400),
            about="Extract the answer span of a question from a passage (sliding windows; official EM/F1).",
        ),
        _spec(
            "c3",
            "c3",
            head="multiple_choice",
            defaults=_defaults(3, 8, 256),
            budget=dict(epochs=6, maxlen=128, max_train_examples=800, max_eval_examples=400),
            about="Multiple-choice reading comprehension: one [CLS] score per choice, a softmax over the choices.",
        ),
        _spec(
            "chid",
            "chid",
            head="candidates",
            defaults=_defaults(3, 16, 128),
            budget=dict(epochs=5, maxlen=64),
            about="Pick the idiom that fills the blank: candidates scored by the MLM head at [MASK]s.",
        ),
        _spec(
            "cluener",
            "cluener",
            CLUENER_TYPES,
            head="global_pointer",
            defaults=_defaults(5, 16, 64),
            budget=dict(epochs=6, batch_size=32, max_train_examples=3000),
            about="Named entities of 10 types with a GlobalPointer head; entity-level P/R/F1.",
        ),
    ]
)


def get_task(task):
    """The TaskSpec of `task` (a name from TASKS, case-insensitive)."""
    spec = TASKS.get(str(task).lower())
    if spec is None:
        raise ValueError(f"unknown CLUE task {task!r}; known tasks: {', '.join(sorted(TASKS))}")
    return spec
