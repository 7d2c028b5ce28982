"""The CLUE input forms, each in one place: its example type, how a record
becomes examples, and how predictions are written for the CLUE site.

A task (``tasks.TASKS``) names its form; ``FORMS[form]`` is a ``Form``:

* ``example``: the typed example (``examples.py``);
* ``parse(record, index, spec, labelled, context)`` -> examples, for the
  JSON-lines forms (one record per line), or ``read(path, reader)`` for the
  forms stored as one JSON document (cmrc2018, c3);
* ``render(spec, ids, predictions)`` -> the text of ``<task>_predict.json``;
* ``context(path, labelled, answer_path)`` -> what ``parse`` needs beside the
  record (chid's answer file);
* ``fields`` / ``label_fields``: the fields every record (a question, for
  cmrc2018 and c3) has, and those a labelled one adds: a file where no record
  has them is another task's (the readers refuse it);
* ``texts``: the example's text attributes (a file whose texts are all empty
  is refused, one where some are is warned about).

Adding a task of an existing form is one ``TaskSpec`` in ``tasks.py``; a new
form is one ``Form`` here (finetune/README.md shows both).
"""

import json
import operator
import pathlib
import re
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import gau_keras.data.clue.examples as ex
from gau_keras.data.clue.records import Malformed, class_label, field, record_id, string_list

#: the blanks of the original CLUE chid files
CHID_TAG = re.compile(r"#idiom\d+#")


# ---------------------------------------------------------- record parsers
def _parse_text(record, index, spec, labelled, context):
    return [ex.TextExample(record_id(record, index), field(record, "sentence"), class_label(record, spec, labelled))]


def _parse_pair(record, index, spec, labelled, context):
    return [
        ex.PairExample(
            record_id(record, index),
            field(record, "sentence1"),
            field(record, "sentence2"),
            class_label(record, spec, labelled),
        )
    ]


def _parse_keywords(record, index, spec, labelled, context):
    return [
        ex.KeywordsExample(
            record_id(record, index),
            field(record, "abst"),
            string_list(record, "keyword"),
            class_label(record, spec, labelled),
        )
    ]


def _span(text, target, k):
    start, words = field(target, f"span{k}_index", int), field(target, f"span{k}_text")
    if text[start : start + len(words)] != words:
        raise Malformed(f"span{k}_text {words!r} is not at span{k}_index {start}")
    return ex.Span(start, words)


def _parse_wsc(record, index, spec, labelled, context):
    text = field(record, "text")
    target = field(record, "target", dict)
    return [
        ex.WSCExample(
            record_id(record, index),
            text,
            _span(text, target, 1),
            _span(text, target, 2),
            class_label(record, spec, labelled),
        )
    ]


def _parse_cluener(record, index, spec, labelled, context):
    text = field(record, "text")
    if not labelled:
        return [ex.NERExample(record_id(record, index), text)]
    entities = []
    for entity_type, mentions in field(record, "label", dict).items():
        if entity_type not in spec.labels:
            raise ValueError(f"entity type {entity_type!r} is not one of the cluener types {list(spec.labels)}")
        if not isinstance(mentions, dict):
            raise Malformed(f"label[{entity_type!r}] must map entity text to spans")
        for words, spans in mentions.items():
            for span in spans if isinstance(spans, list) else [None]:
                if not (isinstance(span, list) and len(span) == 2 and all(isinstance(i, int) for i in span)):
                    raise Malformed(f"label[{entity_type!r}][{words!r}] has a span {span!r}, not [start, end]")
                start, end = span
                if text[start : end + 1] != words:
                    raise Malformed(f"entity {words!r} is not at [{start}, {end}] (inclusive end)")
                entities.append(ex.Entity(entity_type, start, end, words))
    entities.sort(key=lambda e: (e.start, e.end, e.type))
    return [ex.NERExample(record_id(record, index), text, tuple(entities))]


def _candidate_index(value, candidates, what):
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"{what} {value!r} is not a candidate index")
    if not 0 <= value < len(candidates):
        raise ValueError(f"{what} {value} is outside the {len(candidates)} candidates")
    return value


def _parse_chid(record, index, spec, labelled, context):
    """FewCLUE chid (one '#idiom#', "answer") or CLUE chid ('#idiom123#' tags, answer file)."""
    candidates = string_list(record, "candidates")
    content = field(record, "content", (str, list))
    passages = [content] if isinstance(content, str) else content
    if not all(isinstance(p, str) for p in passages):
        raise Malformed("field 'content' must be a string or a list of strings")
    if not any(CHID_TAG.search(p) for p in passages):
        if len(passages) != 1 or passages[0].count(ex.BLANK) != 1:
            raise Malformed(f"content must hold exactly one {ex.BLANK!r} blank or '#idiomNNN#' tags")
        label = _candidate_index(field(record, "answer", int), candidates, "answer") if labelled else None
        return [ex.ClozeExample(record_id(record, index), passages[0], candidates, label)]
    answers = context.get("chid_answers") if labelled else None
    if labelled and answers is None:
        raise FileNotFoundError(
            f"labelled chid records with '#idiomNNN#' tags need their answer file; "
            f"none found at {context.get('chid_answer_path')} (pass answer_path=...)"
        )
    examples = []
    for passage in passages:
        for tag in CHID_TAG.findall(passage):
            label = None
            if answers is not None:
                if tag not in answers:
                    raise Malformed(f"blank {tag} is missing from the answer file")
                label = _candidate_index(answers[tag], candidates, f"answer of {tag}")
            text = CHID_TAG.sub(lambda m, tag=tag: ex.BLANK if m.group(0) == tag else ex.OTHER_BLANK, passage)
            examples.append(ex.ClozeExample(tag, text, candidates, label))
    return examples


# ------------------------------------------------- one-document files
def load_json_document(path):
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path}:{error.lineno}: invalid JSON ({error.msg}); the whole file is one "
            f"JSON document, so nothing can be read from it"
        ) from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 ({error.reason} at byte {error.start})") from None
    except (ValueError, RecursionError) as error:  # a number of > 4300 digits, nesting too deep
        raise ValueError(f"{path}: unreadable JSON ({str(error).split(';')[0]})") from None


def _parse_cmrc_question(question, index, spec, labelled, context):
    """One cmrc2018 question; every reference answer is kept (all count for EM/F1).

    An answer's `start` is its offset in the context: `answer_start` when the
    text is there, else the first occurrence of the text (a few offsets in the
    official files are off), else None: some dev answers are rephrased, not
    spans, and can only serve as scoring references.
    """
    answers = None
    if labelled:
        raw = field(question, "answers", list)
        if not raw:
            raise Malformed("empty 'answers'")
        answers = []
        for answer in raw:
            text, start = field(answer, "text"), field(answer, "answer_start", int)
            if context["context"][start : start + len(text)] != text:
                start = context["context"].find(text)
            answers.append(ex.Answer(text, start if start >= 0 else None))
        answers = tuple(answers)
    return [
        ex.SpanQAExample(field(question, "id", (str, int)), context["context"], field(question, "question"), answers)
    ]


def _read_cmrc2018(path, reader):
    document = load_json_document(path)
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
                context, questions = field(paragraph, "context"), field(paragraph, "qas", list)
            except Malformed as problem:
                reader.stats.records += 1
                reader.malformed(where, str(problem))
                continue
            reader.context = {"context": context}
            for q, question in enumerate(questions):
                reader.add(_parse_cmrc_question, question, q, f"{where}.qas[{q}]")


def _parse_c3_question(question, index, spec, labelled, context):
    choices = string_list(question, "choice")
    label = None
    if labelled:
        answer = field(question, "answer")
        if answer not in choices:
            raise ValueError(f"answer {answer!r} is not one of the choices {list(choices)}")
        label = choices.index(answer)
    qid = question.get("id") if isinstance(question, dict) else None
    return [
        ex.ChoiceExample(
            qid if qid is not None else f"{context['doc_id']}-{index}",
            context["sentences"],
            field(question, "question"),
            choices,
            label,
        )
    ]


def _read_c3(path, reader):
    document = load_json_document(path)
    if not isinstance(document, list):
        raise ValueError(f"{path}: expected a JSON array of [context, questions, id] documents")
    for d, doc in enumerate(document):
        where = f"{path}: document {d}"
        if not (
            isinstance(doc, list)
            and len(doc) == 3
            and isinstance(doc[0], list)
            and all(isinstance(s, str) for s in doc[0])
            and isinstance(doc[1], list)
        ):
            reader.stats.records += 1
            reader.malformed(where, "expected [list of context sentences, list of questions, id]")
            continue
        reader.context = {"sentences": tuple(doc[0]), "doc_id": doc[2]}
        for q, question in enumerate(doc[1]):
            reader.add(_parse_c3_question, question, q, f"{where} ({doc[2]}) question {q}")


def _chid_context(path, labelled, answer_path):
    """chid in the original CLUE form keeps its answers in ``<split>_answer.json``."""
    path = pathlib.Path(path)
    answer_path = pathlib.Path(answer_path) if answer_path else path.with_name(f"{path.stem}_answer.json")
    context = {"chid_answer_path": answer_path}
    if labelled and answer_path.is_file():
        context["chid_answers"] = load_json_document(answer_path)
        if not isinstance(context["chid_answers"], dict):
            raise ValueError(f"{answer_path}: expected a JSON object mapping '#idiomNNN#' to an index")
    return context


# ------------------------------------------------------ submission renderers
def _index(prediction, size, record_id, what):
    try:
        index = operator.index(prediction)
    except TypeError:
        raise ValueError(f"record {record_id!r}: {what} {prediction!r} is not an integer index") from None
    if size is not None and not 0 <= index < size:
        raise ValueError(f"record {record_id!r}: {what} {index} is outside 0..{size - 1}")
    return index


def _label_of(spec, record_id, prediction):
    if isinstance(prediction, str):
        if prediction not in spec.labels:
            raise ValueError(f"record {record_id!r}: label {prediction!r} is not in the {spec.name} label set")
        return prediction
    return spec.labels[_index(prediction, len(spec.labels), record_id, "label index")]


def _ner_label(spec, record_id, entities):
    label = {}
    for entity in entities:
        try:
            entity_type, start, end, text = entity
        except (TypeError, ValueError):
            raise ValueError(f"record {record_id!r}: entity {entity!r} is not (type, start, end, text)") from None
        if entity_type not in spec.labels:
            raise ValueError(f"record {record_id!r}: entity type {entity_type!r} is not a cluener type")
        spans = label.setdefault(entity_type, {}).setdefault(text, [])
        spans.append([_index(start, None, record_id, "start"), _index(end, None, record_id, "end")])
    return label


def _render_labels(spec, ids, predictions):
    """Classification: one line per record, {"id", "label": the label as in the data}."""
    return _lines({"id": i, "label": _label_of(spec, i, p)} for i, p in zip(ids, predictions))


def _render_cmrc2018(spec, ids, predictions):
    """One JSON object {question id: answer text}."""
    for question_id, answer in zip(ids, predictions):
        if not isinstance(answer, str):
            raise ValueError(f"record {question_id!r}: a cmrc2018 prediction is the answer text, got {answer!r}")
    return json.dumps(dict(zip(ids, predictions)), ensure_ascii=False, indent=1) + "\n"


def _render_c3(spec, ids, predictions):
    """One JSON object {question id: choice index}."""
    return (
        json.dumps({i: _index(p, None, i, "choice index") for i, p in zip(ids, predictions)}, ensure_ascii=False) + "\n"
    )


def _render_chid(spec, ids, predictions):
    """Original CLUE blanks: one object {"#idiomNNN#": index}; FewCLUE: a line {"id", "answer"} each."""
    tags = [isinstance(i, str) and bool(CHID_TAG.fullmatch(i)) for i in ids]
    if all(tags):
        return json.dumps({i: _index(p, None, i, "candidate index") for i, p in zip(ids, predictions)}) + "\n"
    if any(tags):
        raise ValueError("chid: records mix '#idiomNNN#' blanks (CLUE) and FewCLUE ids")
    return _lines({"id": i, "answer": _index(p, None, i, "candidate index")} for i, p in zip(ids, predictions))


def _render_cluener(spec, ids, predictions):
    """One line per text, {"id", "label": {type: {entity: [[start, end]]}}} (end inclusive)."""
    return _lines({"id": i, "label": _ner_label(spec, i, p)} for i, p in zip(ids, predictions))


def _lines(rows):
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


# ------------------------------------------------------------------ the forms
@dataclass(frozen=True)
class Form:
    """One input form (see the module docstring)."""

    name: str
    example: type
    render: Callable
    parse: Optional[Callable] = None
    read: Optional[Callable] = None
    context: Optional[Callable] = None
    fields: Tuple[str, ...] = ()
    label_fields: Tuple[str, ...] = ("label",)
    texts: Tuple[str, ...] = ("text",)

    def expected_fields(self, labelled):
        """The fields a record of this form has (labelled: with its label's)."""
        return self.fields + (self.label_fields if labelled else ())


FORMS = {
    form.name: form
    for form in (
        Form("text", ex.TextExample, _render_labels, parse=_parse_text, fields=("sentence",)),
        Form(
            "pair",
            ex.PairExample,
            _render_labels,
            parse=_parse_pair,
            fields=("sentence1", "sentence2"),
            texts=("text_a", "text_b"),
        ),
        Form(
            "keywords",
            ex.KeywordsExample,
            _render_labels,
            parse=_parse_keywords,
            fields=("abst", "keyword"),
            texts=("abstract",),
        ),
        Form("wsc", ex.WSCExample, _render_labels, parse=_parse_wsc, fields=("text", "target")),
        Form(
            "cmrc2018",
            ex.SpanQAExample,
            _render_cmrc2018,
            read=_read_cmrc2018,
            fields=("id", "question"),
            label_fields=("answers",),
            texts=("context", "question"),
        ),
        Form(
            "c3",
            ex.ChoiceExample,
            _render_c3,
            read=_read_c3,
            fields=("question", "choice"),
            label_fields=("answer",),
            texts=("question",),
        ),
        # the answers of labelled chid records are an "answer" field (FewCLUE) or a file of their own (CLUE)
        Form(
            "chid",
            ex.ClozeExample,
            _render_chid,
            parse=_parse_chid,
            context=_chid_context,
            fields=("content", "candidates"),
            label_fields=(),
            texts=(),
        ),
        Form("cluener", ex.NERExample, _render_cluener, parse=_parse_cluener, fields=("text",)),
    )
}
