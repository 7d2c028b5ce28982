"""The CLUE tasks: input form, label set and folder names of each."""
from dataclasses import dataclass
from typing import Optional, Tuple

TNEWS_LABELS = ("100", "101", "102", "103", "104", "106", "107", "108",
                "109", "110", "112", "113", "114", "115", "116")  # 105 and 111 are unused
IFLYTEK_LABELS = tuple(str(i) for i in range(119))
NLI_LABELS = ("contradiction", "entailment", "neutral")
CLUENER_TYPES = ("address", "book", "company", "game", "government",
                 "movie", "name", "organization", "position", "scene")


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
    """
    name: str
    form: str
    labels: Optional[Tuple[str, ...]] = None
    folders: Tuple[str, ...] = ()
    no_label_marker: Optional[str] = None

    @property
    def num_labels(self):
        return None if self.labels is None else len(self.labels)


def _spec(name, form, labels=None, folders=(), **kwargs):
    folders = tuple(folders) or (name,)
    return name, TaskSpec(name, form, labels, folders + tuple(f + "_public" for f in folders), **kwargs)


TASKS = dict([
    _spec("tnews", "text", TNEWS_LABELS),
    _spec("iflytek", "text", IFLYTEK_LABELS),
    _spec("eprstmt", "text", ("Negative", "Positive")),
    _spec("afqmc", "pair", ("0", "1")),
    _spec("bustm", "pair", ("0", "1")),
    _spec("cmnli", "pair", NLI_LABELS, no_label_marker="-"),
    _spec("ocnli", "pair", NLI_LABELS, no_label_marker="-"),
    _spec("ocnli_full", "pair", NLI_LABELS, no_label_marker="-"),
    _spec("csl", "keywords", ("0", "1")),
    _spec("wsc", "wsc", ("true", "false"), folders=("wsc", "cluewsc", "cluewsc2020")),
    _spec("cluewsc", "wsc", ("true", "false"), folders=("cluewsc", "cluewsc2020", "wsc")),
    _spec("cmrc2018", "cmrc2018"),
    _spec("c3", "c3"),
    _spec("chid", "chid"),
    _spec("cluener", "cluener", CLUENER_TYPES),
])


def get_task(task):
    """The TaskSpec of `task` (a name from TASKS, case-insensitive)."""
    spec = TASKS.get(str(task).lower())
    if spec is None:
        raise ValueError(f"unknown CLUE task {task!r}; known tasks: {', '.join(sorted(TASKS))}")
    return spec
