"""CMRC2018 EM/F1, NER entity F1 and accuracy on hand-computed cases."""

import pytest

from gau_keras import metrics


def test_segments_split_chinese_and_keep_words_whole():
    assert metrics.cmrc2018_segments("1862年5月") == ["1862", "年", "5", "月"]
    assert metrics.cmrc2018_segments(" New York 城 ") == ["new", "york", "城"]
    assert metrics.cmrc2018_segments("ω-force") == ["ω", "-", "force"]
    # Removed punctuation does not split the run around it.
    assert metrics.cmrc2018_segments("ω-force", remove_punctuation=True) == ["ωforce"]
    assert metrics.cmrc2018_segments("3.14米") == ["3.14", "米"]


@pytest.mark.parametrize(
    "answers, prediction, em, f1",
    [
        (["光荣和ω-force"], "光荣和ω-force", 1.0, 1.0),
        (["《战国无双3》"], "战国无双3", 1.0, 1.0),  # punctuation ignored
        (["1862年"], "1862年5月", 0.0, 2 * 0.5 * 1 / 1.5),  # P 2/4, R 2/2
        (["北京大学"], "北大学", 0.0, 4 / 7),  # common run "大学": P 2/3, R 2/4
        (["提康德罗加级", "美国海军提康德罗加级"], "海军提康德罗加级", 0.0, 16 / 18),  # best: P 8/8, R 8/10
        (["New York"], "new york city", 0.0, 0.8),  # P 2/3, R 1
        (["上海"], "北京", 0.0, 0.0),
    ],
)
def test_cmrc2018_em_f1(answers, prediction, em, f1):
    assert metrics.cmrc2018_em(answers, prediction) == em
    assert metrics.cmrc2018_f1(answers, prediction) == pytest.approx(f1)


def test_cmrc2018_corpus_scores_count_unanswered_as_zero():
    references = {"q1": ["第二艘", "第二艘舰"], "q2": ["1862年"], "q3": ["美国"]}
    predictions = {"q1": "第二艘", "q2": "1862年5月", "extra": "ignored"}
    scores = metrics.cmrc2018_scores(references, predictions)
    assert scores["em"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert scores["average"] == pytest.approx((scores["em"] + scores["f1"]) / 2)
    assert (scores["total"], scores["unanswered"]) == (3, 1)


def test_cmrc2018_rejects_questions_without_answers():
    with pytest.raises(ValueError, match="'q1'"):
        metrics.cmrc2018_scores({"q1": []}, {"q1": "x"})


def test_entity_scores_micro_and_per_type():
    gold = [{("name", 0, 2), ("company", 5, 8)}, {("game", 4, 7, "CSOL")}]
    pred = [{("name", 0, 2), ("company", 5, 9)}, {("game", 4, 7), ("name", 0, 1)}]
    scores = metrics.entity_scores(gold, pred)
    assert (scores["correct"], scores["predicted"], scores["gold"]) == (2, 4, 3)
    assert scores["precision"] == pytest.approx(0.5)
    assert scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(4 / 7)
    assert scores["per_type"]["name"]["f1"] == pytest.approx(2 / 3)
    assert scores["per_type"]["company"]["f1"] == 0.0
    assert scores["per_type"]["game"]["f1"] == 1.0


def test_entity_scores_match_within_the_same_example_only():
    scores = metrics.entity_scores([{("a", 0, 1)}, set()], [set(), {("a", 0, 1)}])
    assert (scores["correct"], scores["f1"]) == (0, 0.0)


def test_entity_scores_errors():
    with pytest.raises(ValueError, match="2 gold examples but 1 predicted"):
        metrics.entity_scores([[], []], [[]])
    with pytest.raises(ValueError, match="predicted example 0"):
        metrics.entity_scores([[]], [[("name", "x")]])


def test_accuracy():
    assert metrics.accuracy(["a", "b", "c", "d"], ["a", "b", "x", "d"]) == 0.75
    with pytest.raises(ValueError, match="3 items"):
        metrics.accuracy([1, 2, 3], [1])
    with pytest.raises(ValueError, match="no items"):
        metrics.accuracy([], [])
