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

import os
import pathlib

from gau_keras.data.clue.forms import FORMS
from gau_keras.data.clue.tasks import get_task


def _plain(value):
    """numpy scalars → Python scalars so that json can write them."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def _render(spec, records):
    """The file's text for (id, prediction) records (the form's renderer)."""
    ids = [_plain(record_id) for record_id, _ in records]
    duplicates = sorted({str(i) for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{spec.name}: duplicated ids {duplicates[:5]}")
    return FORMS[spec.form].render(spec, ids, [prediction for _, prediction in records])


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
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # a kill never leaves half a file at `path`
    try:
        temporary.write_text(text, encoding="utf-8")
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} already exists; pass overwrite=True (--overwrite) to replace it")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path
