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
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import List

from gau_keras.data.clue.examples import (
    BLANK, OTHER_BLANK, Answer, ChoiceExample, ClozeExample, Entity, KeywordsExample,
    NERExample, PairExample, Span, SpanQAExample, TextExample, WSCExample,
)
from gau_keras.data.clue.tasks import get_task

logger = logging.getLogger(__name__)

_CHID_TAG = re.compile(r"#idiom\d+#")


class MalformedRecordWarning(UserWarning):
    """A CLUE record that could not be read and was skipped."""


class _Malformed(Exception):
    """Internal: the record is unusable for the reason given."""


class _Skip(Exception):
    """Internal: the record is valid but deliberately left out (reason given)."""


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


# ---------------------------------------------------------------- field access
def _field(record, key, kind=str):
    """record[key], checked to be of `kind` (a type or tuple of types); ints may come as digit strings."""
    if not isinstance(record, dict):
        raise _Malformed(f"expected a JSON object, got {type(record).__name__}")
    if record.get(key) is None:
        raise _Malformed(f"missing field {key!r}")
    value = record[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if int in kinds and str not in kinds and isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        value = int(value)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise _Malformed(f"field {key!r} is {type(value).__name__}, expected {expected}")
    return value


def _string_list(record, key):
    values = _field(record, key, list)
    if not all(isinstance(v, str) for v in values):
        raise _Malformed(f"field {key!r} must be a list of strings")
    return tuple(values)


def _record_id(record, index):
    """The record's "id" (or "idx", as in wsc); its 0-based position when it has none."""
    for key in ("id", "idx"):
        if isinstance(record, dict) and record.get(key) is not None:
            return record[key]
    return index


def _class_label(record, spec, labelled):
    """Label index of a classification record, None when unlabelled."""
    if not labelled:
        return None
    value = _field(record, "label", (str, int))
    text = str(value).strip()
    if spec.no_label_marker is not None and text == spec.no_label_marker:
        raise _Skip(f"no gold label ({spec.no_label_marker!r})")
    if text not in spec.labels:
        shown = list(spec.labels) if len(spec.labels) <= 20 else f"{spec.labels[0]!r}..{spec.labels[-1]!r}"
        raise ValueError(f"label {value!r} is not in the {spec.name} label set {shown}")
    return spec.labels.index(text)


# ------------------------------------------------------------ record parsers
def _parse_text(record, index, spec, labelled, context):
    return [TextExample(_record_id(record, index), _field(record, "sentence"),
                        _class_label(record, spec, labelled))]


def _parse_pair(record, index, spec, labelled, context):
    return [PairExample(_record_id(record, index), _field(record, "sentence1"),
                        _field(record, "sentence2"), _class_label(record, spec, labelled))]


def _parse_keywords(record, index, spec, labelled, context):
    return [KeywordsExample(_record_id(record, index), _field(record, "abst"),
                            _string_list(record, "keyword"), _class_label(record, spec, labelled))]


def _span(text, target, k):
    start, words = _field(target, f"span{k}_index", int), _field(target, f"span{k}_text")
    if text[start:start + len(words)] != words:
        raise _Malformed(f"span{k}_text {words!r} is not at span{k}_index {start}")
    return Span(start, words)


def _parse_wsc(record, index, spec, labelled, context):
    text = _field(record, "text")
    target = _field(record, "target", dict)
    return [WSCExample(_record_id(record, index), text, _span(text, target, 1), _span(text, target, 2),
                       _class_label(record, spec, labelled))]


def _parse_cluener(record, index, spec, labelled, context):
    text = _field(record, "text")
    if not labelled:
        return [NERExample(_record_id(record, index), text)]
    entities = []
    for entity_type, mentions in _field(record, "label", dict).items():
        if entity_type not in spec.labels:
            raise ValueError(f"entity type {entity_type!r} is not one of the cluener types {list(spec.labels)}")
        if not isinstance(mentions, dict):
            raise _Malformed(f"label[{entity_type!r}] must map entity text to spans")
        for words, spans in mentions.items():
            for span in spans if isinstance(spans, list) else [None]:
                if not (isinstance(span, list) and len(span) == 2 and all(isinstance(i, int) for i in span)):
                    raise _Malformed(f"label[{entity_type!r}][{words!r}] has a span {span!r}, not [start, end]")
                start, end = span
                if text[start:end + 1] != words:
                    raise _Malformed(f"entity {words!r} is not at [{start}, {end}] (inclusive end)")
                entities.append(Entity(entity_type, start, end, words))
    entities.sort(key=lambda e: (e.start, e.end, e.type))
    return [NERExample(_record_id(record, index), text, tuple(entities))]


def _candidate_index(value, candidates, what):
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Malformed(f"{what} {value!r} is not a candidate index")
    if not 0 <= value < len(candidates):
        raise ValueError(f"{what} {value} is outside the {len(candidates)} candidates")
    return value


def _parse_chid(record, index, spec, labelled, context):
    """FewCLUE chid (one '#idiom#', "answer") or CLUE chid ('#idiom123#' tags, answer file)."""
    candidates = _string_list(record, "candidates")
    content = _field(record, "content", (str, list))
    passages = [content] if isinstance(content, str) else content
    if not all(isinstance(p, str) for p in passages):
        raise _Malformed("field 'content' must be a string or a list of strings")
    if not any(_CHID_TAG.search(p) for p in passages):
        if len(passages) != 1 or passages[0].count(BLANK) != 1:
            raise _Malformed(f"content must hold exactly one {BLANK!r} blank or '#idiomNNN#' tags")
        label = _candidate_index(_field(record, "answer", int), candidates, "answer") if labelled else None
        return [ClozeExample(_record_id(record, index), passages[0], candidates, label)]
    answers = context.get("chid_answers") if labelled else None
    if labelled and answers is None:
        raise FileNotFoundError(
            f"labelled chid records with '#idiomNNN#' tags need their answer file; "
            f"none found at {context.get('chid_answer_path')} (pass answer_path=...)")
    examples = []
    for passage in passages:
        for tag in _CHID_TAG.findall(passage):
            label = None
            if answers is not None:
                if tag not in answers:
                    raise _Malformed(f"blank {tag} is missing from the answer file")
                label = _candidate_index(answers[tag], candidates, f"answer of {tag}")
            text = _CHID_TAG.sub(lambda m: BLANK if m.group(0) == tag else OTHER_BLANK, passage)
            examples.append(ClozeExample(tag, text, candidates, label))
    return examples


_LINE_PARSERS = {
    "text": _parse_text, "pair": _parse_pair, "keywords": _parse_keywords,
    "wsc": _parse_wsc, "cluener": _parse_cluener, "chid": _parse_chid,
}


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
        except _Malformed as problem:
            self.malformed(where, str(problem))
        except _Skip as reason:
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
    parse = _LINE_PARSERS[reader.spec.form]
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
            reader.add(parse, record, lineno - 1, where)


def _load_json_document(path):
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: invalid JSON ({error.msg}); the whole file is one "
                         f"JSON document, so nothing can be read from it") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 ({error.reason} at byte {error.start})") from None


def _parse_cmrc_question(question, index, spec, labelled, context):
    """One cmrc2018 question; every reference answer is kept (all count for EM/F1).

    An answer's `start` is its offset in the context: `answer_start` when the
    text is there, else the first occurrence of the text (a few offsets in the
    official files are off), else None: some dev answers are rephrased, not
    spans, and can only serve as scoring references.
    """
    answers = None
    if labelled:
        raw = _field(question, "answers", list)
        if not raw:
            raise _Malformed("empty 'answers'")
        answers = []
        for answer in raw:
            text, start = _field(answer, "text"), _field(answer, "answer_start", int)
            if context["context"][start:start + len(text)] != text:
                start = context["context"].find(text)
            answers.append(Answer(text, start if start >= 0 else None))
        answers = tuple(answers)
    return [SpanQAExample(_field(question, "id", (str, int)), context["context"],
                          _field(question, "question"), answers)]


def _read_cmrc2018(path, reader):
    document = _load_json_document(path)
    articles = document.get("data") if isinstance(document, dict) else None
    if not isinstance(articles, list):
        raise ValueError(f"{path}: expected a SQuAD-style object with a 'data' list")
    for a, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            reader.stats.records += 1
            reader.malformed(f"{path}: data[{a}]", "missing field 'paragraphs'")
            continue
        for p, paragraph in enumerate(paragraphs):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            try:
                context, questions = _field(paragraph, "context"), _field(paragraph, "qas", list)
            except _Malformed as problem:
                reader.stats.records += 1
                reader.malformed(where, str(problem))
                continue
            reader.context = {"context": context}
            for q, question in enumerate(questions):
                reader.add(_parse_cmrc_question, question, q, f"{where}.qas[{q}]")


def _parse_c3_question(question, index, spec, labelled, context):
    choices = _string_list(question, "choice")
    label = None
    if labelled:
        answer = _field(question, "answer")
        if answer not in choices:
            raise ValueError(f"answer {answer!r} is not one of the choices {list(choices)}")
        label = choices.index(answer)
    qid = question.get("id") if isinstance(question, dict) else None
    return [ChoiceExample(qid if qid is not None else f"{context['doc_id']}-{index}", context["sentences"],
                          _field(question, "question"), choices, label)]


def _read_c3(path, reader):
    document = _load_json_document(path)
    if not isinstance(document, list):
        raise ValueError(f"{path}: expected a JSON array of [context, questions, id] documents")
    for d, doc in enumerate(document):
        where = f"{path}: document {d}"
        if not (isinstance(doc, list) and len(doc) == 3 and isinstance(doc[0], list)
                and all(isinstance(s, str) for s in doc[0]) and isinstance(doc[1], list)):
            reader.stats.records += 1
            reader.malformed(where, "expected [list of context sentences, list of questions, id]")
            continue
        reader.context = {"sentences": tuple(doc[0]), "doc_id": doc[2]}
        for q, question in enumerate(doc[1]):
            reader.add(_parse_c3_question, question, q, f"{where} ({doc[2]}) question {q}")


def _file_reader(form):
    return {"cmrc2018": _read_cmrc2018, "c3": _read_c3}.get(form, _read_json_lines)


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
    context = {}
    if spec.form == "chid":
        answer_path = pathlib.Path(answer_path) if answer_path else path.with_name(f"{path.stem}_answer.json")
        context["chid_answer_path"] = answer_path
        if labelled and answer_path.is_file():
            context["chid_answers"] = _load_json_document(answer_path)
            if not isinstance(context["chid_answers"], dict):
                raise ValueError(f"{answer_path}: expected a JSON object mapping '#idiomNNN#' to an index")
    reader = _Reader(spec, stats, labelled, context)
    _file_reader(spec.form)(path, reader)
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
        (list of typed examples, LoadStats). The summary is logged, as a
        warning when records were malformed.
    """
    if labelled is None:
        labelled = not str(split).startswith("test")
    stats = LoadStats(get_task(task).name)
    examples = []
    for path in find_split_files(task, split, data_dir):
        found, stats = load_file(task, path, labelled=labelled, answer_path=answer_path, stats=stats)
        examples.extend(found)
    logger.log(logging.WARNING if stats.malformed else logging.INFO, stats.summary())
    return examples, stats
