"""Scoring for the CLUE tasks: accuracy, CMRC2018 EM/F1, entity-level NER P/R/F1.

Pure Python (no TensorFlow), so finetuning scripts and tests can score
predictions without a model.

CMRC2018 follows the rules of the official evaluation script:

* text is lower-cased and stripped; it is segmented into single characters for
  Chinese (U+4E00–U+9FA5) and for the punctuation marks below, while runs of
  other characters (Latin words, numbers) are split into word tokens;
* EM: after deleting the punctuation marks, the prediction equals one of the
  reference answers;
* F1: punctuation marks are deleted *before* segmenting (so "a-b" becomes the
  single token "ab"), the overlap is the longest common *contiguous* run of
  segments (longest common substring, not subsequence), P = overlap / |pred|,
  R = overlap / |ref|, F1 = 2PR / (P + R);
* both are maximised over the reference answers, averaged over all reference
  questions (a question without a prediction scores 0) and reported in percent.

The official script splits the non-Chinese runs with NLTK's Treebank
tokenizer (which needs NLTK's downloaded data); here a regular expression does
it: whitespace separates words, numbers with inner "." or "," stay whole, other
punctuation is split off. The two differ only on English corner cases (NLTK
splits "don't" into "do" + "n't" and keeps "U.S." whole); CMRC2018 answers are
Chinese text, names and numbers.
"""

import re
from collections import Counter

__all__ = [
    "accuracy",
    "cmrc2018_segments",
    "cmrc2018_em",
    "cmrc2018_f1",
    "cmrc2018_scores",
    "entity_scores",
]

# The official punctuation list, one character per entry (its "……" entry is
# compared against single characters there and so never matches anything).
CMRC_PUNCTUATION = frozenset("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
_CHINESE = re.compile("[\u4e00-\u9fa5]")
_WORD = re.compile(r"\d+(?:[.,]\d+)+|\w+|[^\w\s]")


def accuracy(y_true, y_pred):
    """Fraction of equal items in two equally long, non-empty sequences."""
    y_true, y_pred = list(y_true), list(y_pred)
    if len(y_true) != len(y_pred):
        raise ValueError(f"accuracy: y_true has {len(y_true)} items but y_pred has {len(y_pred)}")
    if not y_true:
        raise ValueError("accuracy: no items to score")
    return sum(t == p for t, p in zip(y_true, y_pred)) / len(y_true)


def cmrc2018_segments(text, remove_punctuation=False):
    """Splits `text` the CMRC2018 way: Chinese characters and punctuation alone, words whole.

    With `remove_punctuation`, punctuation marks are deleted and do not split
    the surrounding run.
    """
    segments, run = [], []
    for char in str(text).lower().strip():
        if remove_punctuation and char in CMRC_PUNCTUATION:
            continue
        if _CHINESE.match(char) or char in CMRC_PUNCTUATION:
            segments.extend(_WORD.findall("".join(run)))
            run = []
            segments.append(char)
        else:
            run.append(char)
    segments.extend(_WORD.findall("".join(run)))
    return segments


def _strip_punctuation(text):
    return "".join(c for c in str(text).lower().strip() if c not in CMRC_PUNCTUATION)


def _longest_common_run(a, b):
    """Length of the longest common contiguous run of two sequences."""
    best, previous = 0, [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            if x == y:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def cmrc2018_em(answers, prediction):
    """1.0 when the prediction matches one of the reference answers, else 0.0."""
    predicted = _strip_punctuation(prediction)
    return float(any(_strip_punctuation(a) == predicted for a in answers))


def cmrc2018_f1(answers, prediction):
    """Best segment-level F1 of the prediction over the reference answers (0..1)."""
    predicted = cmrc2018_segments(prediction, remove_punctuation=True)
    best = 0.0
    for answer in answers:
        reference = cmrc2018_segments(answer, remove_punctuation=True)
        overlap = _longest_common_run(reference, predicted)
        if overlap:
            precision, recall = overlap / len(predicted), overlap / len(reference)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def cmrc2018_scores(references, predictions):
    """Official-style corpus scores.

    Args:
        references: {question id: list of reference answer texts}.
        predictions: {question id: predicted answer text}; ids absent here
            score 0, ids absent from `references` are ignored.
    Returns:
        {"em": %, "f1": %, "average": (em + f1) / 2, "total": questions,
         "unanswered": questions without a prediction}.
    """
    if not references:
        raise ValueError("cmrc2018_scores: no reference questions")
    em = f1 = 0.0
    unanswered = 0
    for qid, answers in references.items():
        if not answers:
            raise ValueError(f"cmrc2018_scores: question {qid!r} has no reference answer")
        if qid not in predictions:
            unanswered += 1
            continue
        em += cmrc2018_em(answers, predictions[qid])
        f1 += cmrc2018_f1(answers, predictions[qid])
    total = len(references)
    em, f1 = 100.0 * em / total, 100.0 * f1 / total
    return {"em": em, "f1": f1, "average": (em + f1) / 2, "total": total, "unanswered": unanswered}


def _prf(correct, predicted, gold):
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * correct / (predicted + gold) if predicted + gold else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "correct": correct,
        "predicted": predicted,
        "gold": gold,
    }


def entity_scores(gold, predicted):
    """Micro entity-level precision / recall / F1 over (type, start, end) triples.

    Args:
        gold, predicted: equally long sequences (one item per example) of
            iterables of (type, start, end) tuples; extra tuple fields (e.g. the
            entity text) are ignored. An entity counts as correct when type,
            start and end all match one in the same example.
    Returns:
        {"precision", "recall", "f1", "correct", "predicted", "gold",
         "per_type": {type: the same keys}}; a ratio with a zero denominator is 0.
    """
    gold, predicted = list(gold), list(predicted)
    if len(gold) != len(predicted):
        raise ValueError(f"entity_scores: {len(gold)} gold examples but {len(predicted)} predicted")
    counts = {"correct": Counter(), "predicted": Counter(), "gold": Counter()}
    for index, (g, p) in enumerate(zip(gold, predicted)):
        g_set = {_entity_key(e, "gold", index) for e in g}
        p_set = {_entity_key(e, "predicted", index) for e in p}
        for key, entities in (("gold", g_set), ("predicted", p_set), ("correct", g_set & p_set)):
            counts[key].update(entity[0] for entity in entities)
    result = _prf(*(sum(counts[k].values()) for k in ("correct", "predicted", "gold")))
    types = sorted(set(counts["gold"]) | set(counts["predicted"]))
    result["per_type"] = {t: _prf(counts["correct"][t], counts["predicted"][t], counts["gold"][t]) for t in types}
    return result


def _entity_key(entity, which, index):
    try:
        entity_type, start, end = entity[:3]
        return (entity_type, int(start), int(end))
    except (TypeError, ValueError):
        raise ValueError(
            f"entity_scores: {which} example {index} has {entity!r}, not a (type, start, end) tuple"
        ) from None
