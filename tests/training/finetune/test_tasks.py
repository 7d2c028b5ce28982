"""Each head kind's example -> features conversion on real CLUE lines, and the
cmrc2018 sliding windows mapped back to character spans."""

import json

import numpy as np
import pytest

from gau_keras.data.clue import TASKS, Answer, Span, SpanQAExample, load_file, load_task, write_predictions
from gau_keras.tokenizers import Tokenizer
from gau_keras.training.finetune.c3 import C3Task
from gau_keras.training.finetune.chid import ChidTask, keep_around
from gau_keras.training.finetune.classification import (
    FORMS,
    KEYWORD_SEPARATOR,
    KeywordsClassificationTask,
    PairClassificationTask,
    mark_spans,
)
from gau_keras.training.finetune.cluener import ClueNerTask
from gau_keras.training.finetune.cmrc2018 import Cmrc2018Task, best_span, char_span_to_tokens, windows
from gau_keras.training.finetune.tasks import names, same_model, task_class

CLUE = "clue"


@pytest.fixture(scope="module")
def tokenizer():
    from tests.conftest import SHARED_DATA

    vocab = SHARED_DATA / "vocab" / "gau_alpha_vocab.txt"
    if not vocab.is_file():
        pytest.skip(f"{vocab} is absent (set GAU_KERAS_DATA to point at the shared data)")
    return Tokenizer(str(vocab), do_lower_case=True)


def _examples(shared_data, task, split="train", n=4):
    return load_task(task, split, shared_data / CLUE)[0][:n]


def _check_sequence(tokenizer, token_ids, segment_ids, maxlen):
    assert token_ids[0] == tokenizer.token_cls_id and token_ids[-1] == tokenizer.token_sep_id
    assert len(token_ids) == len(segment_ids) <= maxlen


@pytest.mark.parametrize(
    "task,maxlen",
    [
        ("tnews", 32),
        ("iflytek", 64),
        ("bustm", 32),
        ("ocnli", 32),
        ("ocnli_full", 32),
        ("csl", 96),
        ("cluewsc", 64),
    ],
)
def test_classification_features(shared_data, tokenizer, task, maxlen):
    task_obj = task_class(task)(task, tokenizer, maxlen)
    for example in _examples(shared_data, task):
        (feature,) = task_obj.features(example, training=True)
        token_ids, segment_ids = feature.inputs
        _check_sequence(tokenizer, token_ids, segment_ids, maxlen)
        assert feature.label == example.label
        first, second = task_obj.texts(example)
        expected = tokenizer.encode(first, second, maxlen=maxlen)
        np.testing.assert_array_equal(token_ids, expected[0])
        assert (segment_ids.max() == 1) == (second is not None)


def test_a_registry_row_is_a_task(shared_data, tokenizer):
    task = task_class("eprstmt")("eprstmt", tokenizer, 64)
    for example in _examples(shared_data, "eprstmt"):
        (feature,) = task.features(example, training=True)
        assert feature.inputs[0].tolist() == tokenizer.encode(example.text, maxlen=64)[0]
        assert feature.label == example.label


def test_a_task_class_accepts_only_the_tasks_of_its_head_and_form(tokenizer):
    assert PairClassificationTask("ocnli", tokenizer, 32).spec.labels == TASKS["ocnli"].labels
    with pytest.raises(ValueError, match="task_name 'tnews' is not one of"):
        PairClassificationTask("tnews", tokenizer, 32)
    with pytest.raises(ValueError, match="task_name 'tnews'"):
        Cmrc2018Task("tnews", tokenizer, 32)


def test_every_task_with_a_head_has_its_class_and_defaults():
    """One registry: each row with a head names a class that runs it, and the CLI's defaults."""
    assert set(names()) == {name for name, spec in TASKS.items() if spec.head}
    for name in names():
        spec = TASKS[name]
        assert task_class(name).runs(spec) and same_model(name)[0] == name
        assert set(spec.defaults) == {"epochs", "batch_size", "maxlen", "lr"}
    assert set(FORMS) == {spec.form for spec in TASKS.values() if spec.head == "classification"}


def test_csl_puts_the_keywords_first(shared_data, tokenizer):
    example = _examples(shared_data, "csl", n=1)[0]
    task = KeywordsClassificationTask("csl", tokenizer, 256)
    assert task.texts(example) == (KEYWORD_SEPARATOR.join(example.keywords), example.abstract)


def test_wsc_marks_both_spans(shared_data, tokenizer):
    for example in _examples(shared_data, "cluewsc", n=10):
        marked = mark_spans(example.text, example.span1, example.span2)
        assert f"<{example.span1.text}>" in marked and f"[{example.span2.text}]" in marked
        assert len(marked) == len(example.text) + 4
        assert "".join(c for c in marked if c not in "<>[]") == "".join(c for c in example.text if c not in "<>[]")
    assert mark_spans("他说小明来了", Span(2, "小明"), Span(0, "他")) == "[他]说<小明>来了"
    assert mark_spans("小明他", Span(0, "小明"), Span(2, "他")) == "<小明>[他]"
    assert mark_spans("他", Span(0, "他"), Span(0, "他")) == "<[他]>"
    assert mark_spans("小明的他", Span(0, "小明的他"), Span(3, "他")) == "<小明的[他]>"
    assert mark_spans("他的狗", Span(0, "他的狗"), Span(0, "他")) == "<[他]的狗>"


def test_c3_one_row_per_choice(shared_data, tokenizer):
    task = C3Task("c3", tokenizer, 96)
    for example in _examples(shared_data, "c3"):
        (feature,) = task.features(example, training=True)
        token_ids, segment_ids = feature.inputs
        assert token_ids.shape == segment_ids.shape and token_ids.shape[0] == len(example.choices)
        assert token_ids.shape[1] <= 96 and feature.label == example.label
        for row, choice in zip(token_ids, example.choices):
            row = row[row != 0]
            second = tokenizer.tokens_to_ids(tokenizer.tokenize(example.question + choice)[1:])
            assert list(row[-len(second) :]) == second  # the question+choice segment is kept whole


def test_chid_masks_the_blank_and_lists_candidate_tokens(shared_data, tokenizer):
    task = ChidTask("chid", tokenizer, 64)
    for example in _examples(shared_data, "chid"):
        (feature,) = task.features(example, training=True)
        token_ids, segment_ids, positions, candidates = feature.inputs
        _check_sequence(tokenizer, token_ids, segment_ids, 64)
        assert list(np.nonzero(token_ids == tokenizer.token_mask_id)[0]) == list(positions)
        assert len(positions) == 4 and candidates.shape == (len(example.candidates), 4)
        assert [tokenizer.decode(c) for c in candidates] == list(example.candidates)
        left, right = example.content.split("#idiom#")
        left_ids = tokenizer.tokens_to_ids(tokenizer.tokenize(left)[1:-1])
        right_ids = tokenizer.tokens_to_ids(tokenizer.tokenize(right)[1:-1])
        kept_left, kept_right = token_ids[1 : positions[0]], token_ids[positions[-1] + 1 : -1]
        assert list(kept_left) == left_ids[len(left_ids) - len(kept_left) :]  # the context nearest the blank
        assert list(kept_right) == right_ids[: len(kept_right)]
        assert feature.label == example.label


def test_chid_original_clue_form_features_and_submission(tmp_path, tokenizer):
    path = tmp_path / "test.json"
    record = {
        "candidates": ["一心一意", "三心二意", "画蛇添足"],
        "content": ["他做事#idiom000001#，从不#idiom000002#。"],
    }
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    examples, _ = load_file("chid", path, labelled=False)
    assert [e.id for e in examples] == ["#idiom000001#", "#idiom000002#"]
    task = ChidTask("chid", tokenizer, 32)
    for example in examples:
        (feature,) = task.features(example, training=False)
        token_ids, _, positions, candidates = feature.inputs
        assert list(token_ids[positions]) == [tokenizer.token_mask_id] * 4 and candidates.shape == (3, 4)
        assert (token_ids == tokenizer.token_mask_id).sum() == 4  # the other blank is "____", not masks
    out = write_predictions(
        "chid", [(e.id, task.submission(e, i)) for i, e in enumerate(examples)], tmp_path / "chid_predict.json"
    )
    assert json.loads(out.read_text()) == {"#idiom000001#": 0, "#idiom000002#": 1}


def test_chid_context_budget():
    assert keep_around(list("abcdef"), list("xyz"), 6) == (list("def"), list("xyz"))
    assert keep_around(list("ab"), list("uvwxyz"), 6) == (list("ab"), list("uvwx"))
    assert keep_around(list("abcdef"), list("uvwxyz"), 4) == (list("ef"), list("uv"))


def test_cluener_labels_point_at_the_entities(shared_data, tokenizer):
    task = ClueNerTask("cluener", tokenizer, 64)
    for example in _examples(shared_data, "cluener", n=8):
        (feature,) = task.features(example, training=True)
        token_ids, segment_ids = feature.inputs
        _check_sequence(tokenizer, token_ids, segment_ids, 64)
        assert feature.label.shape == (10, len(token_ids), len(token_ids))
        # the labelled spans, turned into logits, decode back to the gold entities
        logits = np.where(feature.label == 1, 5.0, -5.0)
        assert task.predict(example, [feature], [logits]) == [tuple(e) for e in example.entities]
        assert task.score([example], [task.predict(example, [feature], [logits])])["f1"] == 1.0


def test_windows_cover_the_passage():
    assert windows(10, 4, 3) == [0, 3, 6]
    assert windows(4, 4, 2) == [0]
    assert windows(0, 4, 2) == [0]
    for n, w, s in [(37, 8, 5), (100, 30, 30), (9, 3, 1)]:
        starts = windows(n, w, s)
        assert starts[-1] + w >= n and all(b - a == s for a, b in zip(starts, starts[1:]))


def test_char_span_to_tokens_and_best_span():
    mapping = [[0], [1, 2], [], [3], [4, 5, 6]]
    assert char_span_to_tokens(mapping, 1, 3) == (1, 3)
    assert char_span_to_tokens(mapping, 2, 5) == (1, 4)
    assert char_span_to_tokens(mapping, 7, 8) is None
    start = np.array([0, 5, 0, 0, 9.0])
    end = np.array([0, 0, 4, 0, 1.0])
    assert best_span(start, end, 0, 4, 10)[1:] == (4, 4)  # 9 + 1 beats 5 + 4
    assert best_span(start, end, 0, 3, 10)[1:] == (1, 2)
    assert best_span(start, end, 1, 3, 1)[1:] == (1, 1)  # max one token


def test_cmrc2018_windows_map_answers_back_to_characters(shared_data, tokenizer):
    examples = [
        e
        for e in load_task("cmrc2018", "train", shared_data / CLUE)[0]
        if e.answers[0].start is not None and len(e.context) > 300
    ][:3]
    assert examples, "no long cmrc2018 passage found"
    task = Cmrc2018Task("cmrc2018", tokenizer, 96, doc_stride=40, max_question_len=24)
    for example in examples:
        features = task.features(example, training=True)
        assert len(features) > 2
        answer = example.answers[0]
        inside = [f for f in features if f.label[0] > 0]
        assert inside, "the answer lies in no window"
        for feature in features:
            offset, begin, mapping = feature.meta
            token_ids, segment_ids = feature.inputs
            _check_sequence(tokenizer, token_ids, segment_ids, 96)
            assert segment_ids[offset - 1] == 0 and segment_ids[offset] == 1
            if feature.label[0] > 0:
                start, end = feature.label
                chars = example.context[mapping[start - offset][0] : mapping[end - offset][-1] + 1]
                assert chars == answer.text
        # logits peaking at the answer of the last window that holds it -> the answer text
        outputs = []
        for feature in features:
            logits = np.zeros((2, len(feature.inputs[0])))
            if feature is inside[-1]:
                logits[0, feature.label[0]] = logits[1, feature.label[1]] = 10.0
            outputs.append(logits)
        prediction = task.predict(example, features, outputs)
        assert prediction == answer.text
        assert task.score([example], [prediction]) == {"em": 100.0, "f1": 100.0, "average": 100.0}


def test_cmrc2018_rephrased_answers_give_no_training_windows(tokenizer):
    example = SpanQAExample("q", "一二三四五", "问？", (Answer("六", None),))
    task = Cmrc2018Task("cmrc2018", tokenizer, 32)
    assert task.features(example, training=True) == []
    assert len(task.features(example, training=False)) == 1
    assert task.left_out == {"answer not found in its context": 1}  # counted, with its reason
