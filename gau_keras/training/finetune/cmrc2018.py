"""CMRC2018: extract the answer span of a question from a passage.

    python -m finetune cmrc2018 --data-dir ../shared/data/clue --out-dir runs \
        --predict-split dev        # ../shared/data has no cmrc2018 test file

Each input is ``[CLS] question [SEP] window of the passage [SEP]``. Passages
longer than the window are covered by several windows starting every
``--doc-stride`` passage tokens. A start and an end head on the token states
give logits; a window whose training answer is not wholly inside it is
trained to point at [CLS] (position 0). At prediction, the best span
(start <= end, at most ``--max-answer-len`` tokens, both inside the passage
part) over all windows of a question wins by start + end logit, and is mapped
back to the passage characters through `Tokenizer.rematch`. Dev scores are the
official CMRC2018 EM and F1 (`gau_keras.metrics.cmrc2018_scores`).
"""

import keras
import numpy as np

from gau_keras import flags, metrics
from gau_keras.layers import heads
from gau_keras.training.finetune.task import Feature, Task


def windows(num_tokens, window, stride):
    """Start offsets of windows of ``window`` tokens, every ``stride``, covering ``num_tokens``."""
    if window < 1 or stride < 1:
        raise ValueError(f"windows: window ({window}) and stride ({stride}) must be positive")
    starts = [0]
    while starts[-1] + window < num_tokens:
        starts.append(starts[-1] + stride)
    return starts


def char_span_to_tokens(mapping, start, end):
    """First and last token index covering characters start..end (inclusive); None when absent."""
    first = next((i for i, chars in enumerate(mapping) if chars and chars[-1] >= start), None)
    last = next((i for i in reversed(range(len(mapping))) if mapping[i] and mapping[i][0] <= end), None)
    if first is None or last is None or first > last:
        return None
    return first, last


def best_span(start_logits, end_logits, first, last, max_answer_len):
    """(score, start, end) of the best span with first <= start <= end <= last, end - start < max_answer_len."""
    s = np.asarray(start_logits[first : last + 1], "float64")
    e = np.asarray(end_logits[first : last + 1], "float64")
    scores = s[:, None] + e[None, :]
    i, j = np.indices(scores.shape)
    scores[(j < i) | (j - i >= max_answer_len)] = -np.inf
    flat = int(np.argmax(scores))
    start, end = divmod(flat, scores.shape[1])
    return float(scores[start, end]), first + start, first + end


class Cmrc2018Task(Task):
    head = "span"
    metric = "f1"

    def __init__(self, task_name, tokenizer, maxlen, doc_stride=128, max_question_len=64, max_answer_len=32):
        super().__init__(task_name, tokenizer, maxlen)
        self.doc_stride = doc_stride
        self.max_question_len = max_question_len
        self.max_answer_len = max_answer_len

    @classmethod
    def add_arguments(cls, parser):
        parser.add_argument(
            "--doc-stride",
            type=flags.positive_int,
            default=128,
            help="passage tokens between the starts of two windows",
        )
        parser.add_argument("--max-question-len", type=flags.positive_int, default=64)
        parser.add_argument("--max-answer-len", type=flags.positive_int, default=32, help="in tokens")

    def features(self, example, training):
        """One feature per window; meta = (passage token offset in the window's input,
        first passage token of the window, char mapping of the window's passage tokens)."""
        tokenizer = self.tokenizer
        question = tokenizer.tokenize(example.question)[1:-1][: self.max_question_len]
        passage = tokenizer.tokenize(example.context)[1:-1]
        mapping = tokenizer.rematch(example.context, passage)
        window = self.maxlen - len(question) - 3
        if window < 1:
            raise ValueError(
                f"cmrc2018: maxlen {self.maxlen} leaves no room for the passage after a {len(question)}-token question"
            )
        answer = None
        if training:
            found = [a for a in example.answers or () if a.start is not None]
            if not found:  # a rephrased answer: nothing to point at
                self.left_out["answer not found in its context"] += 1
                return []
            answer = char_span_to_tokens(mapping, found[0].start, found[0].start + len(found[0].text) - 1)
            if answer is None:
                self.left_out["answer on no token of the context"] += 1
                return []
        offset = len(question) + 2
        features = []
        for begin in windows(len(passage), window, self.doc_stride):
            part = passage[begin : begin + window]
            tokens = [tokenizer.token_start] + question + [tokenizer.token_end] + part + [tokenizer.token_end]
            token_ids = np.array(tokenizer.tokens_to_ids(tokens), "int32")
            segment_ids = np.array([0] * offset + [1] * (len(part) + 1), "int32")
            label = np.zeros(2, "int32")
            if answer is not None and begin <= answer[0] and answer[1] < begin + len(part):
                label = np.array([answer[0] - begin + offset, answer[1] - begin + offset], "int32")
            features.append(
                Feature((token_ids, segment_ids), label, meta=(offset, begin, mapping[begin : begin + len(part)]))
            )
        return features

    def build_model(self, transformer):
        encoder = transformer.model
        logits = heads.span_head(encoder.output, encoder.inputs[0])
        return keras.Model(encoder.inputs, logits, name="cmrc2018_span")

    def predict(self, example, features, outputs):
        """The answer text: the best span over all windows, in passage characters."""
        best = (-np.inf, "")
        for feature, logits in zip(features, outputs):
            offset, _, mapping = feature.meta
            if not mapping:
                continue
            score, start, end = best_span(logits[0], logits[1], offset, offset + len(mapping) - 1, self.max_answer_len)
            chars_start, chars_end = mapping[start - offset], mapping[end - offset]
            if score > best[0] and chars_start and chars_end:
                best = (score, example.context[chars_start[0] : chars_end[-1] + 1])
        return best[1]

    def score(self, examples, predictions):
        references = {e.id: [a.text for a in e.answers] for e in examples}
        scores = metrics.cmrc2018_scores(references, {e.id: p for e, p in zip(examples, predictions)})
        return {"em": scores["em"], "f1": scores["f1"], "average": scores["average"]}
