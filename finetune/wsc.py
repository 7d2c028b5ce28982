"""WSC (CLUEWSC2020): does the pronoun (span 2) refer to the noun phrase (span 1)?

    python -m finetune.wsc --task-name cluewsc --data-dir ../shared/data/clue
    python -m finetune.wsc --data-dir CLUE_DATA                         # wsc/ or cluewsc2020/

Span-aware input, as in the CLUE baselines: the two spans are marked inside
the text with special characters and the [CLS] vector of the marked text is
classified. Span 1 (the candidate referent) is wrapped in ``< … >`` and span 2
(the pronoun) in ``[ … ]``. The CLUE baseline wraps span 1 in ``_``, but ``_``
is not in the GAU-alpha vocab (it would become [UNK]); ``<``, ``>``, ``[`` and
``]`` are single-character tokens of that vocab (and of the bundled model's),
and none of them occurs in the CLUEWSC texts. So the encoder sees where the
spans are without new embeddings, and the two spans get different marks so
their roles differ. Example: ``<小明>对小红说[他]明天来`` (label: does "他"
mean "小明"?).
"""
import sys

from finetune.runner import run
from finetune.task import ClassificationTask

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


class WscTask(ClassificationTask):
    """Input: ``[CLS] marked text [SEP]``; label "true"/"false"."""
    task_names = ("wsc", "cluewsc")
    defaults = dict(epochs=5, batch_size=16, maxlen=128, lr=5e-5)

    def texts(self, example):
        return mark_spans(example.text, example.span1, example.span2), None


if __name__ == "__main__":
    sys.exit(run(WscTask))
