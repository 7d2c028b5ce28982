"""Reading CLUE files into typed examples, tolerant of damaged records.

Policy, the same for every task:

* a malformed record (invalid JSON or UTF-8, not an object, a missing or
  mistyped field, a field only another task's records carry (`TaskSpec.marks`),
  a span whose text is not at its offset) is reported with
  `warnings.warn(..., MalformedRecordWarning)` naming the file and line (or,
  for the single-JSON files of cmrc2018 and c3, the position in the document),
  then skipped and counted;
* a record whose label is outside the task's label set raises `ValueError`
  naming the file and line: that is a wrong task or a wrong file, not noise;
* a file is refused as a whole (`DataFileError`, naming it) when no record
  has the fields the task expects (another task's file: the fields expected
  and found are named), when more than half its records are malformed (the
  threshold of prepare_corpus, `gau_keras.data.mlm.mostly_unusable`: the
  count and the first problems are named), or when every example's text is
  empty; some empty texts are kept, with an `EmptyTextWarning` naming the
  file and the count;
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
from gau_keras.data.clue.tasks import TASKS, get_task
from gau_keras.data.mlm import mostly_unusable
from gau_keras.errors import DataFileError

logger = logging.getLogger(__name__)


class MalformedRecordWarning(UserWarning):
    """A CLUE record that could not be read and was skipped."""


class EmptyTextWarning(UserWarning):
    """Some examples of a CLUE file have an empty text (they are kept)."""


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
        empty_texts: examples kept although a text of theirs is empty.
    """

    task: str
    paths: List[str] = field(default_factory=list)
    records: int = 0
    examples: int = 0
    malformed: int = 0
    skipped: Counter = field(default_factory=Counter)
    problems: List[str] = field(default_factory=list)
    empty_texts: int = 0

    def summary(self):
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items())) or "none"
        empty = f"; {self.empty_texts} with an empty text" if self.empty_texts else ""
        return (
            f"{self.task}: {self.examples} examples from {self.records} records in "
            f"{', '.join(self.paths)}; {self.malformed} malformed skipped; other skipped: {skipped}{empty}"
        )


# --------------------------------------------------------------- file readers
class _Reader:
    """Collects one file's examples and stats; turns parser outcomes into the policy above."""

    def __init__(self, spec, stats, labelled, context=None):
        self.spec, self.stats, self.labelled = spec, stats, labelled
        self.context = context or {}
        self.examples, self.problems = [], []  # problems: (where, reason), warned when the file is accepted
        self.first_record, self.objects, self.fitting, self.found = stats.records, 0, 0, set()
        self.expected = FORMS[spec.form].expected_fields(labelled)
        self.foreign = {
            mark: other.name
            for other in TASKS.values()
            if other.form == spec.form
            for mark in other.marks
            if mark not in spec.marks
        }

    @property
    def records(self):
        """The records of this file read so far (the read functions count unreadable ones in ``stats``)."""
        return self.stats.records - self.first_record

    def add(self, parse, record, index, where):
        self.stats.records += 1
        if isinstance(record, dict):
            self.objects += 1
            self.found.update(list(record)[:20] if len(self.found) < 40 else ())
            marks = [key for key in record if key in self.foreign]
            if marks:
                self.malformed(
                    where, f"field {marks[0]!r} marks a record of {self.foreign[marks[0]]}, not of {self.spec.name}"
                )
                return
            self.fitting += all(record.get(key) is not None for key in self.expected)
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
        self.stats.malformed += 1
        self.stats.problems.append(f"{where}: {reason}; record skipped")
        self.problems.append((where, reason))

    def finish(self, path):
        """The file's checks (see the module docstring); then its malformed records are warned about."""
        name = self.spec.name
        if self.records and not self.fitting and self.objects:
            others = {}
            for mark, other in self.foreign.items():
                others.setdefault(other, []).append(repr(mark))
            expected = ", ".join(map(repr, self.expected)) + "".join(
                f"; not {other}'s {', '.join(marks)}" for other, marks in others.items()
            )
            found = ", ".join(repr(key[:30]) for key in sorted(self.found)[:12])
            raise DataFileError(
                f"{path}: no record has the fields {name} expects ({expected}); found {found}"
                f"{_fitting_tasks(self.found, self.labelled, name)}"
            )
        if mostly_unusable(len(self.problems), self.records):
            first = "; ".join(f"{_position(where, path)}: {reason}" for where, reason in self.problems[:3])
            raise DataFileError(
                f"{path}: {len(self.problems)} of {self.records} records are malformed, more than "
                f"half: is it a {name} file? First problems: {first}"
            )
        texts = FORMS[self.spec.form].texts
        empty = [e for e in self.examples if any(not getattr(e, text).strip() for text in texts)]
        if empty and len(empty) == len(self.examples):
            raise DataFileError(
                f"{path}: every one of its {len(empty)} {name} examples has an empty text ({', '.join(texts)})"
            )
        if empty:
            warnings.warn(
                f"{path}: {len(empty)} of {len(self.examples)} {name} examples have an empty text "
                f"({', '.join(texts)}), the first of them record {empty[0].id!r}; they are kept",
                EmptyTextWarning,
                stacklevel=3,
            )
        self.stats.empty_texts += len(empty)
        for where, reason in self.problems:
            warnings.warn(f"{where}: {reason}; record skipped", MalformedRecordWarning, stacklevel=3)


def _position(where, path):
    """``where`` without its file: "line 3", "data[0].paragraphs[1]", "document 2"."""
    short = where.removeprefix(str(path)).lstrip(": ")
    return f"line {short}" if short.isdigit() else short


def _fitting_tasks(found, labelled, task):
    """The tasks whose records have the fields ``found``, as ``": the fields of <tasks>"`` ("" when none)."""
    names = [
        spec.name
        for spec in TASKS.values()
        if spec.name != task
        and set(FORMS[spec.form].expected_fields(labelled)) <= found
        and (set(spec.marks) & found or not any(set(other.marks) & found for other in TASKS.values()))
    ]
    return f": the fields of {', '.join(names)}" if names else ""


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
            except (ValueError, RecursionError) as error:  # a number of > 4300 digits, nesting too deep
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
    Raises:
        DataFileError: the file is refused as a whole (the module docstring says when).
        ValueError: a label outside the task's label set (file and line named).
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
    reader.finish(path)
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
    raise FileNotFoundError(f"{spec.name}: no {split}.json in {', '.join(str(f) for f in folders)}")


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
    logger.info(stats.summary())  # malformed records were warned about one by one
    return examples, stats
