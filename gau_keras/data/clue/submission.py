"""Test predictions in the formats the CLUE site accepts (`<task>_predict.json`).

* classification (tnews, iflytek, afqmc, cmnli, ocnli, csl, wsc, ...): one JSON
  object per line, `{"id": ..., "label": "<label as in the data>"}`, in the
  order of the test file (tnews: "108", iflytek: "10", ocnli: "neutral",
  wsc: "true");
* cmrc2018: one JSON object {question id: answer text};
* c3: one JSON object {question id: index of the chosen choice};
* chid: original CLUE blanks one JSON object {"#idiomNNN#": candidate index};
  FewCLUE records one line each, `{"id": ..., "answer": candidate index}`;
* cluener: one line per text, `{"id": ..., "label": {type: {entity: [[start, end]]}}}`
  (end inclusive).
"""
import json
import operator
import pathlib
import re

from gau_keras.data.clue.tasks import get_task

_CHID_TAG = re.compile(r"#idiom\d+#")


def _plain(value):
    """numpy scalars → Python scalars so that json can write them."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def _index(prediction, size, record_id, what):
    try:
        index = operator.index(prediction)
    except TypeError:
        raise ValueError(f"record {record_id!r}: {what} {prediction!r} is not an integer index") from None
    if size is not None and not 0 <= index < size:
        raise ValueError(f"record {record_id!r}: {what} {index} is outside 0..{size - 1}")
    return index


def _class_label(spec, record_id, prediction):
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


def _render(spec, records):
    """The file's text for (id, prediction) records."""
    ids = [_plain(record_id) for record_id, _ in records]
    duplicates = sorted({str(i) for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{spec.name}: duplicated ids {duplicates[:5]}")
    if spec.form == "cmrc2018":
        for record_id, answer in records:
            if not isinstance(answer, str):
                raise ValueError(f"record {record_id!r}: a cmrc2018 prediction is the answer text, got {answer!r}")
        return json.dumps({i: a for i, (_, a) in zip(ids, records)}, ensure_ascii=False, indent=1) + "\n"
    if spec.form == "c3":
        return json.dumps({i: _index(p, None, i, "choice index") for i, (_, p) in zip(ids, records)},
                          ensure_ascii=False) + "\n"
    if spec.form == "chid":
        tags = [isinstance(i, str) and bool(_CHID_TAG.fullmatch(i)) for i in ids]
        if all(tags):
            return json.dumps({i: _index(p, None, i, "candidate index") for i, (_, p) in zip(ids, records)}) + "\n"
        if any(tags):
            raise ValueError("chid: records mix '#idiomNNN#' blanks (CLUE) and FewCLUE ids")
        rows = [{"id": i, "answer": _index(p, None, i, "candidate index")} for i, (_, p) in zip(ids, records)]
    elif spec.form == "cluener":
        rows = [{"id": i, "label": _ner_label(spec, i, p)} for i, (_, p) in zip(ids, records)]
    else:
        rows = [{"id": i, "label": _class_label(spec, i, p)} for i, (_, p) in zip(ids, records)]
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_predictions(task, records, path, overwrite=False):
    """Writes (id, prediction) records of `task` to `path` in the CLUE submission format.

    Predictions: a label index or label string (classification), the answer
    text (cmrc2018), a choice / candidate index (c3, chid), an iterable of
    (type, start, end, text) entities (cluener). Records are written in the
    order given (the test file's order). Nothing is written when a record is
    invalid. Returns the path.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: an invalid or duplicated record (named).
    """
    spec = get_task(task)
    records = [tuple(r) for r in records]
    if any(len(r) != 2 for r in records):
        raise ValueError(f"{spec.name}: records must be (id, prediction) pairs")
    path = pathlib.Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True (--overwrite) to replace it")
    text = _render(spec, records)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w" if overwrite else "x", encoding="utf-8") as f:
        f.write(text)
    return path
