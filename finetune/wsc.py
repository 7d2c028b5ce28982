"""WSC (CLUEWSC2020): does the pronoun (span 2) refer to the noun phrase (span 1)?

    python -m finetune.wsc --task-name cluewsc --data-dir ../shared/data/clue
    python -m finetune.wsc --data-dir CLUE_DATA                         # wsc/ or cluewsc2020/

Span-aware input, as in the CLUE baselines: the two spans are marked inside
the text with special characters and the [CLS] vector of the marked text is
classified. Span 1 (the candidate referent) is wrapped in ``_ … _`` and span 2
(the pronoun) in ``[ … ]``; both marks are single punctuation tokens of the
character vocab, so the encoder sees where the spans are without new
embeddings, and the two spans get different marks so their roles differ.
Example: ``_小明_对小红说[他]明天来`` (label: does "他" mean "小明"?).
"""
import sys

from finetune.runner import run
from finetune.task import ClassificationTask

SPAN1_MARKS = ("_", "_")
SPAN2_MARKS = ("[", "]")


def mark_spans(text, span1, span2):
    """``text`` with span1 in SPAN1_MARKS and span2 in SPAN2_MARKS (spans: (index, text))."""
    inserts = [(span1.index, 0, SPAN1_MARKS[0]), (span1.index + len(span1.text), 1, SPAN1_MARKS[1]),
               (span2.index, 0, SPAN2_MARKS[0]), (span2.index + len(span2.text), 1, SPAN2_MARKS[1])]
    chars = list(text)
    # right to left, so earlier offsets stay valid; at one offset the opening
    # mark is inserted first, so a closing mark there ends up left of it
    for position, _, mark in sorted(inserts, key=lambda item: (-item[0], item[1])):
        chars.insert(position, mark)
    return "".join(chars)


class WscTask(ClassificationTask):
    """Input: ``[CLS] marked text [SEP]``; label "true"/"false"."""
    task_names = ("wsc", "cluewsc")
    defaults = dict(epochs=5, batch_size=16, maxlen=128, lr=5e-5)

    def texts(self, example):
        return mark_spans(example.text, example.span1, example.span2), None


if __name__ == "__main__":
    sys.exit(run(WscTask))
