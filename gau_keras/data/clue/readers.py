"""Reading CLUE files into typed examples, tolerant of damaged records.

Policy, the same for every task:

* a malformed record (invalid JSON or UTF-8, not an object, a missing or
  mistyped field, a span whose text is not at its offset) is reported with
  `warnings.warn(..., MalformedRecordWarning)` naming the file and line (or,
  for the single-JSON files of cmrc2018 and c3, the position in the document),
  then skipped and counted;
* a record whose label is outside the task's label set raises `ValueError`
  naming the file and line: that is a wrong task or a wrong file, not noise;
* records labelled '-' in cmnli/ocnli (no annotator majority) are skipped and
  counted under `stats.skipped`;
* unlabelled splits (test) give examples whose label is None.
"""
import json
import logging
import pathlib
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import List

from gau_keras.data.clue.forms import FORMS
from gau_keras.data.clue.records import Malformed, Skip
from gau_keras.data.clue.tasks import get_task

logger = logging.getLogger(__name__)


class MalformedRecordWarning(UserWarning):
    """A CLUE record that could not be read and was skipped."""


@dataclass
class LoadStats:
    """What reading a task's file(s) did.

    Attributes:
        task, paths: what was read.
        records: records seen (lines, questions or documents).
        examples: examples returned.
        malformed: records reported and skipped.
        skipped: {reason: count} of valid records left out (e.g. '-' labels).
        problems: "file:line: reason" for each malformed record.
    """
    task: str
    paths: List[str] = field(default_factory=list)
    records: int = 0
    examples: int = 0
    malformed: int = 0
    skipped: Counter = field(default_factory=Counter)
    problems: List[str] = field(default_factory=list)

    def summary(self):
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items())) or "none"
        return (f"{self.task}: {self.examples} examples from {self.records} records in "
                f"{', '.join(self.paths)}; {self.malformed} malformed skipped; other skipped: {skipped}")


# --------------------------------------------------------------- file readers
class _Reader:
    """Collects examples and stats; turns parser outcomes into the policy above."""

    def __init__(self, spec, stats, labelled, context=None):
        self.spec, self.stats, self.labelled = spec, stats, labelled
        self.context = context or {}
        self.examples = []

    def add(self, parse, record, index, where):
        self.stats.records += 1
        try:
            found = parse(record, index, self.spec, self.labelled, self.context)
        except Malformed as problem:
            self.malformed(where, str(problem))
        except Skip as reason:
            self.stats.skipped[str(reason)] += 1
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        else:
            self.examples.extend(found)

    def malformed(self, where, reason):
        message = f"{where}: {reason}; record skipped"
        self.stats.malformed += 1
        self.stats.problems.append(message)
        warnings.warn(message, MalformedRecordWarning, stacklevel=4)


def _read_json_lines(path, reader):
    parse = FORMS[reader.spec.form].parse
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as error:
                reader.stats.records += 1
                reader.malformed(where, f"not UTF-8 ({error.reason} at byte {error.start})")
                continue
            if not line.strip():
                reader.stats.skipped["blank lines"] += 1
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                reader.stats.records += 1
                reader.malformed(where, f"invalid JSON ({error.msg}, column {error.colno})")
                continue
            except (ValueError, RecursionError) as error:   # a number of > 4300 digits, nesting too deep
                reader.stats.records += 1
                reader.malformed(where, f"unreadable JSON ({str(error).split(';')[0]})")
                continue
            reader.add(parse, record, lineno - 1, where)


# ------------------------------------------------------------------ public API
def load_file(task, path, labelled=True, answer_path=None, stats=None):
    """Reads one file of `task`.

    Args:
        task: a name from `TASKS` (e.g. "tnews", "ocnli_full", "cluewsc").
        path: the file (JSON lines, or one JSON document for cmrc2018 / c3).
        labelled: False for test files (labels are then None even if present).
        answer_path: chid only: the answer file {"#idiomNNN#": index} of a file
            in the original CLUE format; default: `<split>_answer.json` beside it.
        stats: a LoadStats to add to (several files of one split).
    Returns:
        (list of examples, LoadStats).
    """
    spec = get_task(task)
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{spec.name}: no such file {path}")
    stats = stats if stats is not None else LoadStats(spec.name)
    stats.paths.append(str(path))
    form = FORMS[spec.form]
    context = form.context(path, labelled, answer_path) if form.context else {}
    reader = _Reader(spec, stats, labelled, context)
    (form.read or _read_json_lines)(path, reader)
    stats.examples += len(reader.examples)
    return reader.examples, stats


def find_split_files(task, split, data_dir):
    """The file(s) holding `split` of `task` under `data_dir`.

    Looked for: `<data_dir>/<folder>/<split>.json` for the task's folders
    ("tnews", "tnews_public", ...), then `<data_dir>/<split>.json`; for c3 also
    the official `m-<split>.json` + `d-<split>.json` pair.
    """
    spec = get_task(task)
    data_dir = pathlib.Path(data_dir)
    folders = [data_dir / name for name in spec.folders] + [data_dir]
    for folder in folders:
        if (folder / f"{split}.json").is_file():
            return [folder / f"{split}.json"]
        pair = [folder / f"m-{split}.json", folder / f"d-{split}.json"]
        if spec.form == "c3" and all(p.is_file() for p in pair):
            return pair
    raise FileNotFoundError(
        f"{spec.name}: no {split}.json in {', '.join(str(f) for f in folders)}")


def load_task(task, split, data_dir, labelled=None, answer_path=None):
    """Reads `split` ("train", "dev", "test", ...) of a CLUE task.

    Args:
        task: a name from `TASKS`.
        split: the file stem; splits starting with "test" are read unlabelled
            unless `labelled` says otherwise.
        data_dir: a folder holding the task's folder (e.g. ../shared/data/clue
            or the CLUE download folder) or the task's files themselves.
        labelled, answer_path: see `load_file`.
    Returns:
        (list of typed examples, LoadStats). The summary is logged (INFO);
        each malformed record was a `MalformedRecordWarning`.
    """
    if labelled is None:
        labelled = not str(split).startswith("test")
    stats = LoadStats(get_task(task).name)
    examples = []
    for path in find_split_files(task, split, data_dir):
        found, stats = load_file(task, path, labelled=labelled, answer_path=answer_path, stats=stats)
        examples.extend(found)
    logger.info(stats.summary())     # malformed records were warned about one by one
    return examples, stats
