"""The classification head kind: one `ClassificationTask` per input form.

Every task of the forms text, pair, keywords and wsc (``gau_keras.data.clue``)
is classified from the [CLS] vector of one text or a text pair; the classes
below say how an example of each form becomes those texts. Which tasks run
them, with which defaults, is `gau_keras.data.clue.TASKS` (``head="classification"``):
adding a classification task of an existing form is one row there
(finetune/README.md, "Adding a task").

wsc's input: the two spans are marked inside the text and the [CLS] vector of
the marked text is classified, as in the CLUE baselines. Span 1 (the candidate
referent) is wrapped in ``< … >`` and span 2 (the pronoun) in ``[ … ]``. The
CLUE baseline wraps span 1 in ``_``, but ``_`` is not in the GAU-alpha vocab
(it would become [UNK]); ``<``, ``>``, ``[`` and ``]`` are single-character
tokens of that vocab (and of the bundled model's), and none of them occurs in
the CLUEWSC texts. Example: ``<小明>对小红说[他]明天来`` (label: does "他" mean
"小明"?).
"""

from gau_keras.training.finetune.task import ClassificationTask

#: what joins csl's keywords into the first text
KEYWORD_SEPARATOR = "；"
#: the marks around wsc's span 1 (the candidate referent) and span 2 (the pronoun)
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


class TextClassificationTask(ClassificationTask):
    """[CLS] classification of one text (tnews, iflytek, eprstmt)."""

    form = "text"

    def texts(self, example):
        return example.text, None


class PairClassificationTask(ClassificationTask):
    """[CLS] classification of a text pair ``[CLS] a [SEP] b [SEP]`` (afqmc, bustm, cmnli, ocnli)."""

    form = "pair"

    def texts(self, example):
        return example.text_a, example.text_b


class KeywordsClassificationTask(ClassificationTask):
    """csl: ``[CLS] kw1；kw2；… [SEP] abstract [SEP]`` (the abstract is cut first)."""

    form = "keywords"

    def texts(self, example):
        return KEYWORD_SEPARATOR.join(example.keywords), example.abstract


class WscClassificationTask(ClassificationTask):
    """wsc: ``[CLS] marked text [SEP]``, the spans marked by `mark_spans`."""

    form = "wsc"

    def texts(self, example):
        return mark_spans(example.text, example.span1, example.span2), None


#: form -> its classification task class
FORMS = {
    cls.form: cls
    for cls in (TextClassificationTask, PairClassificationTask, KeywordsClassificationTask, WscClassificationTask)
}
