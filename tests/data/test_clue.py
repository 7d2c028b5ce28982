"""CLUE loaders on the real files and on damaged ones; submission writers."""

import json
import re
import warnings

import pytest

from gau_keras.data import clue
from gau_keras.data.clue import BLANK, OTHER_BLANK, TASKS, MalformedRecordWarning, load_file, load_task


def raw_lines(path, n=None):
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return lines if n is None else lines[:n]


def load_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", MalformedRecordWarning)  # real files must load cleanly
        return load_task(*args, **kwargs)


# ------------------------------------------------------------------ real files
@pytest.mark.parametrize(
    "task, folder, num_labels",
    [
        ("tnews", "tnews", 15),
        ("iflytek", "iflytek", 119),
        ("eprstmt", "eprstmt", 2),
    ],
)
def test_single_text_tasks(shared_data, task, folder, num_labels):
    examples, stats = load_quietly(task, "dev", shared_data / "clue")
    raw = raw_lines(shared_data / "clue" / folder / "dev.json")
    assert len(examples) == len(raw) == stats.examples and stats.malformed == 0
    assert TASKS[task].num_labels == num_labels
    for example, record in zip(examples[:20], raw):
        assert (example.id, example.text) == (record["id"], record["sentence"])
        assert TASKS[task].labels[example.label] == str(record["label"])


def test_tnews_labels_are_the_15_codes(shared_data):
    examples, _ = load_quietly("tnews", "train", shared_data / "clue")
    assert {TASKS["tnews"].labels[e.label] for e in examples} == set(TASKS["tnews"].labels)
    assert "105" not in TASKS["tnews"].labels and "111" not in TASKS["tnews"].labels


@pytest.mark.parametrize("task, folder", [("afqmc", "bustm"), ("bustm", "bustm"), ("ocnli", "ocnli")])
def test_pair_tasks(shared_data, task, folder):
    examples, _ = load_quietly(task, "train", shared_data / "clue" / folder)
    raw = raw_lines(shared_data / "clue" / folder / "train.json")
    assert len(examples) == len(raw)
    for example, record in zip(examples[:20], raw):
        assert (example.text_a, example.text_b) == (record["sentence1"], record["sentence2"])
        assert TASKS[task].labels[example.label] == record["label"]


def test_nli_dash_labels_are_skipped_and_counted(shared_data):
    examples, stats = load_quietly("cmnli", "dev", shared_data / "clue" / "ocnli_full")
    raw = raw_lines(shared_data / "clue" / "ocnli_full" / "dev.json")
    dashes = sum(r["label"] == "-" for r in raw)
    assert dashes > 0
    assert stats.skipped == {"no gold label ('-')": dashes}
    assert len(examples) == len(raw) - dashes == stats.examples
    assert stats.records == len(raw) and stats.malformed == 0


def test_csl(shared_data):
    examples, _ = load_quietly("csl", "train", shared_data / "clue")
    record = raw_lines(shared_data / "clue" / "csl" / "train.json", 1)[0]
    assert examples[0].abstract == record["abst"]
    assert examples[0].keywords == tuple(record["keyword"])
    assert TASKS["csl"].labels[examples[0].label] == record["label"]


@pytest.mark.parametrize("task", ["wsc", "cluewsc"])
def test_wsc(shared_data, task):
    examples, _ = load_quietly(task, "dev", shared_data / "clue")
    record = raw_lines(shared_data / "clue" / "cluewsc" / "dev.json", 1)[0]
    first = examples[0]
    assert first.id == record["idx"]
    assert first.span1 == (record["target"]["span1_index"], record["target"]["span1_text"])
    assert first.text[first.span2.index :][: len(first.span2.text)] == record["target"]["span2_text"]
    assert TASKS[task].labels[first.label] == record["label"]


def test_cmrc2018(shared_data):
    examples, stats = load_quietly("cmrc2018", "dev", shared_data / "clue")
    document = json.loads((shared_data / "clue" / "cmrc2018" / "dev.json").read_text(encoding="utf-8"))
    questions = [(p["context"], q) for a in document["data"] for p in a["paragraphs"] for q in p["qas"]]
    assert len(examples) == len(questions) == stats.records
    for example, (context, question) in zip(examples[:50], questions):
        assert (example.id, example.question, example.context) == (question["id"], question["question"], context)
        assert [a.text for a in example.answers] == [a["text"] for a in question["answers"]]
        for answer in example.answers:
            assert answer.start is None or context[answer.start : answer.start + len(answer.text)] == answer.text
    assert all(any(a.start is not None for a in e.answers) for e in examples)


def test_c3(shared_data):
    examples, _ = load_quietly("c3", "train", shared_data / "clue")
    document = json.loads((shared_data / "clue" / "c3" / "train.json").read_text(encoding="utf-8"))
    assert len(examples) == sum(len(doc[1]) for doc in document)
    sentences, questions, doc_id = document[0]
    for q, (example, question) in enumerate(zip(examples, questions)):
        assert example.id == f"{doc_id}-{q}"
        assert example.context == tuple(sentences)
        assert example.choices[example.label] == question["answer"]


def test_chid_fewclue(shared_data):
    examples, _ = load_quietly("chid", "dev", shared_data / "clue")
    raw = raw_lines(shared_data / "clue" / "chid" / "dev.json")
    assert len(examples) == len(raw)
    for example, record in zip(examples[:20], raw):
        assert example.content.count(BLANK) == 1
        assert (example.id, example.label, example.candidates) == (
            record["id"],
            record["answer"],
            tuple(record["candidates"]),
        )


def test_chid_original_clue_format(tmp_path, shared_data):
    """Real FewCLUE passages re-packed the way the original CLUE chid stores them."""
    a, b = raw_lines(shared_data / "clue" / "chid" / "train.json", 2)
    record = {
        "candidates": a["candidates"],
        "content": [
            a["content"].replace(BLANK, "#idiom000007#") + b["content"].replace(BLANK, "#idiom000008#"),
            b["content"].replace(BLANK, "#idiom000009#"),
        ],
    }
    (tmp_path / "train.json").write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    (tmp_path / "train_answer.json").write_text(
        json.dumps({"#idiom000007#": 3, "#idiom000008#": 6, "#idiom000009#": 0}), encoding="utf-8"
    )
    examples, _ = load_quietly("chid", "train", tmp_path)
    assert [(e.id, e.label) for e in examples] == [("#idiom000007#", 3), ("#idiom000008#", 6), ("#idiom000009#", 0)]
    first = examples[0]
    assert first.content.count(BLANK) == 1 and first.content.count(OTHER_BLANK) == 1
    assert first.content.index(BLANK) == a["content"].index(BLANK)
    assert examples[1].content.index(OTHER_BLANK) == a["content"].index(BLANK)
    (tmp_path / "train_answer.json").unlink()
    with pytest.raises(FileNotFoundError, match="train_answer.json"):
        load_task("chid", "train", tmp_path)
    unlabelled, _ = load_task("chid", "train", tmp_path, labelled=False)
    assert [e.label for e in unlabelled] == [None] * 3


def test_cluener(shared_data):
    examples, _ = load_quietly("cluener", "train", shared_data / "clue")
    record = raw_lines(shared_data / "clue" / "cluener" / "train.json", 1)[0]
    assert examples[0].id == 0 and examples[0].text == record["text"]
    expected = sorted(
        (t, s, e, w) for t, mentions in record["label"].items() for w, spans in mentions.items() for s, e in spans
    )
    assert sorted(examples[0].entities) == expected
    assert all(e.text == ex.text[e.start : e.end + 1] for ex in examples[:200] for e in ex.entities)
    assert len(TASKS["cluener"].labels) == 10


@pytest.mark.parametrize("task", ["tnews", "iflytek", "bustm", "ocnli", "csl", "cluewsc", "chid", "c3"])
def test_test_files_have_no_labels_and_keep_ids(shared_data, task):
    examples, stats = load_quietly(task, "test", shared_data / "clue")
    assert examples and stats.malformed == 0
    assert all(e.label is None for e in examples)
    if task != "c3":
        record = raw_lines(shared_data / "clue" / task / "test.json", 1)[0]
        assert examples[0].id == record.get("id", record.get("idx"))


# --------------------------------------------------------------- damaged files
def write(path, lines):
    path.write_bytes(b"".join(line if isinstance(line, bytes) else line.encode("utf-8") + b"\n" for line in lines))
    return path


def test_malformed_lines_are_reported_skipped_and_counted(tmp_path):
    path = write(
        tmp_path / "train.json",
        [
            json.dumps({"id": 1, "sentence": "好", "label": 108}),
            '{"id": 2, "sentence": "坏"',  # truncated JSON
            json.dumps({"id": 3, "label": "101"}),  # no sentence
            "",
            b"\xff\xfe not utf-8\n",
            json.dumps([1, 2]),  # not an object
            json.dumps({"id": 7, "sentence": 5, "label": "101"}),  # sentence not a string
            json.dumps({"id": 8, "sentence": "中", "label": "116"}),
        ]
        + [json.dumps({"id": i, "sentence": "好", "label": "100"}) for i in range(9, 13)],
    )  # 5 of 11 malformed
    with pytest.warns(MalformedRecordWarning) as caught:
        examples, stats = load_task("tnews", "train", tmp_path)
    assert [(e.id, e.label) for e in examples] == [(1, 7), (8, 14)] + [(i, 0) for i in range(9, 13)]
    assert (stats.malformed, stats.records, stats.skipped["blank lines"]) == (5, 11, 1)
    messages = [str(w.message) for w in caught]
    for lineno, reason in [
        (2, "invalid JSON"),
        (3, "missing field 'sentence'"),
        (5, "not UTF-8"),
        (6, "expected a JSON object"),
        (7, "field 'sentence' is int"),
    ]:
        assert any(m.startswith(f"{path}:{lineno}: {reason}") for m in messages), (lineno, messages)
    assert "5 malformed" in stats.summary()


@pytest.mark.parametrize(
    "task, bad",
    [
        ("tnews", {"sentence": "x", "label": 105, "id": 0}),
        ("iflytek", {"sentence": "x", "label": "119", "id": 0}),
        ("ocnli", {"sentence1": "x", "sentence2": "y", "label": "maybe", "id": 0}),
        ("bustm", {"sentence1": "x", "sentence2": "y", "label": "2", "id": 0}),
        (
            "cluewsc",
            {
                "text": "他说",
                "target": {"span1_index": 0, "span1_text": "他", "span2_index": 1, "span2_text": "说"},
                "label": "yes",
                "idx": 0,
            },
        ),
        ("chid", {"id": 0, "content": f"a{BLANK}b", "candidates": ["甲", "乙"], "answer": 2}),
        ("cluener", {"text": "北京", "label": {"city": {"北京": [[0, 1]]}}}),
    ],
)
def test_label_outside_the_label_set_is_an_error_naming_the_line(tmp_path, task, bad):
    good = raw_good_record(task)
    path = write(tmp_path / "dev.json", [json.dumps(good, ensure_ascii=False), json.dumps(bad, ensure_ascii=False)])
    with pytest.raises(ValueError, match=f"{path}:2: "):
        load_task(task, "dev", tmp_path)


def raw_good_record(task):
    return {
        "tnews": {"sentence": "x", "label": 100, "id": 0},
        "iflytek": {"sentence": "x", "label": 118, "id": 0},
        "ocnli": {"sentence1": "x", "sentence2": "y", "label": "neutral", "id": 0},
        "bustm": {"sentence1": "x", "sentence2": "y", "label": "1", "id": 0},
        "cluewsc": {
            "text": "他说",
            "target": {"span1_index": 0, "span1_text": "他", "span2_index": 1, "span2_text": "说"},
            "label": "true",
            "idx": 0,
        },
        "chid": {"id": 0, "content": f"a{BLANK}b", "candidates": ["甲", "乙"], "answer": 1},
        "cluener": {"text": "北京", "label": {"address": {"北京": [[0, 1]]}}},
        "csl": {"id": 0, "abst": "x", "keyword": ["x"], "label": "0"},
    }[task]


@pytest.mark.parametrize(
    "task, record, reason",
    [
        (
            "cluewsc",
            {
                "text": "他说",
                "target": {"span1_index": 1, "span1_text": "他", "span2_index": 1, "span2_text": "说"},
                "label": "true",
            },
            "span1_text '他' is not at",
        ),
        ("cluener", {"text": "北京", "label": {"address": {"北京": [[0, 0]]}}}, "is not at [0, 0]"),
        ("chid", {"id": 0, "content": "no blank", "candidates": ["甲"], "answer": 0}, "exactly one"),
        ("csl", {"id": 0, "abst": "x", "keyword": "not a list", "label": "0"}, "field 'keyword' is str"),
    ],
)
def test_malformed_task_records(tmp_path, task, record, reason):
    path = write(
        tmp_path / "train.json",
        [json.dumps(raw_good_record(task), ensure_ascii=False), json.dumps(record, ensure_ascii=False)],
    )
    with pytest.warns(MalformedRecordWarning, match=re.escape(f"{path}:2: ") + ".*" + re.escape(reason)):
        examples, stats = load_task(task, "train", tmp_path)
    assert (len(examples), stats.malformed) == (1, 1)


def test_c3_damaged_documents(tmp_path):
    docs = [
        [["对话"], [{"question": "问", "choice": ["甲", "乙"], "answer": "乙"}], "m-1"],
        ["not a document"],
        [["对话"], [{"question": "问", "choice": ["甲", "乙"]}], "m-3"],
        [["对话"], [{"question": "问", "choice": ["甲", "乙"], "answer": "甲"}] * 2, "m-4"],
    ]  # 2 of 5 malformed
    (tmp_path / "dev.json").write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    with pytest.warns(MalformedRecordWarning) as caught:
        examples, stats = load_task("c3", "dev", tmp_path)
    assert [(e.id, e.label) for e in examples] == [("m-1-0", 1), ("m-4-0", 0), ("m-4-1", 0)]
    assert stats.malformed == 2
    assert any("document 1" in str(w.message) for w in caught)
    assert any("document 2 (m-3) question 0: missing field 'answer'" in str(w.message) for w in caught)
    docs[2][1][0]["answer"] = "丙"
    (tmp_path / "dev.json").write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ValueError, match="document 2 .*'丙' is not one of the choices"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MalformedRecordWarning)
            load_task("c3", "dev", tmp_path)


TNEWS_RECORD = {"label": "102", "label_desc": "news_entertainment", "sentence": "新片上映", "keywords": "", "id": 0}


@pytest.mark.parametrize(
    "task, records, labelled, message",
    [
        # afqmc's / bustm's pairs given to tnews, whose labels are not checked before the missing 'sentence'
        (
            "tnews",
            [{"id": 0, "sentence1": "a", "sentence2": "b", "label": "0"}] * 3,
            True,
            "no record has the fields tnews expects ('sentence', 'label'; not iflytek's 'label_des'); found 'id', "
            "'label', 'sentence1', 'sentence2': the fields of afqmc, bustm, cmnli, ocnli, ocnli_full",
        ),
        # tnews's records given to iflytek: their codes 100..116 are iflytek labels too
        (
            "iflytek",
            [TNEWS_RECORD] * 3,
            True,
            "no record has the fields iflytek expects ('sentence', 'label'; not "
            "tnews's 'label_desc', 'keywords'); found 'id', 'keywords', 'label', 'label_desc', 'sentence': "
            "the fields of tnews",
        ),
        (
            "iflytek",
            [{"id": 0, "sentence": "新片上映", "keywords": ""}] * 3,
            False,  # tnews's test file
            "no record has the fields iflytek expects ('sentence'; not tnews's",
        ),
        (
            "tnews",
            [{"id": 0, "sentence": "x", "label": "110", "label_des": "游戏"}] * 3,
            True,
            "found 'id', 'label', 'label_des', 'sentence': the fields of iflytek",
        ),
        (
            "cluewsc",
            [{"text": "北京", "label": {"address": {"北京": [[0, 1]]}}}] * 3,
            True,
            "expects ('text', 'target', 'label'); found 'label', 'text': the fields of cluener",
        ),
    ],
)
def test_another_tasks_file_is_refused_naming_the_file_the_task_and_the_fields(
    tmp_path, task, records, labelled, message
):
    path = write(tmp_path / "train.json", [json.dumps(r, ensure_ascii=False) for r in records])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused without a warning per line first
        with pytest.raises(clue.DataFileError, match=re.escape(f"{path}: ") + ".*" + re.escape(message)):
            load_file(task, path, labelled=labelled)


def test_a_record_of_another_task_among_this_tasks_is_malformed(tmp_path):
    good = {"id": 1, "sentence": "x", "label": "110", "label_des": "游戏"}
    path = write(tmp_path / "train.json", [json.dumps(r, ensure_ascii=False) for r in (good, TNEWS_RECORD, good)])
    with pytest.warns(
        MalformedRecordWarning, match=re.escape(f"{path}:2: field 'label_desc' marks a record of tnews, not of iflytek")
    ):
        examples, stats = load_file("iflytek", path)
    assert (len(examples), stats.malformed) == (2, 1)


def test_a_file_mostly_malformed_is_refused_naming_the_count_and_the_first_problems(tmp_path):
    good = json.dumps({"id": 0, "sentence": "x", "label": "100"})
    path = write(
        tmp_path / "train.json",
        [good, '{"id": 1', json.dumps({"id": 2, "sentence": 3, "label": "100"}), "", good, b"\xff\n"],
    )
    with pytest.raises(
        clue.DataFileError,
        match=re.escape(
            f"{path}: 3 of 5 records are malformed, more than half: is it a tnews file? First problems: line 2: "
            "invalid JSON (Expecting ',' delimiter, column 1); line 3: field 'sentence' is int, expected str; "
            "line 6: not UTF-8 (invalid start byte at byte 0)"
        ),
    ):
        load_file("tnews", path)
    path.write_text("\n".join([good, '{"id": 1', good, "[]"]) + "\n")  # half: read, the rest warned about
    with pytest.warns(MalformedRecordWarning):
        examples, stats = load_file("tnews", path)
    assert (len(examples), stats.malformed) == (2, 2)


@pytest.mark.parametrize(
    "task, record, texts",
    [
        ("tnews", {"sentence": " ", "label": "100"}, "text"),
        ("bustm", {"sentence1": "a", "sentence2": "", "label": "1"}, "text_a, text_b"),
    ],
)
def test_empty_texts_are_refused_when_all_and_warned_about_when_some(tmp_path, task, record, texts):
    empty = [dict(record, id=i) for i in range(3)]
    path = write(tmp_path / "train.json", [json.dumps(r) for r in empty])
    with pytest.raises(
        clue.DataFileError, match=re.escape(f"{path}: every one of its 3 {task} examples has an empty text ({texts})")
    ):
        load_file(task, path)
    full = {key: "好" if key.startswith("sentence") else value for key, value in record.items()}
    write(path, [json.dumps(r) for r in empty[:2]] + [json.dumps(dict(full, id=i)) for i in range(3, 6)])
    with pytest.warns(
        clue.EmptyTextWarning,
        match=re.escape(
            f"{path}: 2 of 5 {task} examples have an empty text ({texts}), the first of them record 0; they are kept"
        ),
    ):
        examples, stats = load_file(task, path)
    assert (len(examples), stats.empty_texts) == (5, 2) and "2 with an empty text" in stats.summary()


def test_single_json_files_with_bad_json_name_the_line(tmp_path):
    (tmp_path / "train.json").write_text('{"version": "v1.0",\n "data": [\n oops]}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.json:3: invalid JSON"):
        load_task("cmrc2018", "train", tmp_path)


def test_cmrc2018_damaged_question(tmp_path):
    document = {
        "data": [
            {
                "paragraphs": [
                    {
                        "context": "北京是首都",
                        "qas": [
                            {"id": "Q0", "question": "首都?", "answers": [{"text": "北京", "answer_start": 0}]},
                            {"id": "Q1", "answers": [{"text": "北京", "answer_start": 0}]},
                            {"id": "Q2", "question": "哪?", "answers": [{"text": "首都", "answer_start": 0}]},
                        ],
                    }
                ]
            }
        ]
    }
    (tmp_path / "dev.json").write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    with pytest.warns(MalformedRecordWarning, match=r"data\[0\].paragraphs\[0\].qas\[1\]: missing field 'question'"):
        examples, _ = load_task("cmrc2018", "dev", tmp_path)
    assert [e.id for e in examples] == ["Q0", "Q2"]
    assert examples[1].answers[0].start == 3  # wrong offset repaired


def test_unknown_task_and_missing_files(tmp_path):
    with pytest.raises(ValueError, match="unknown CLUE task 'nope'"):
        load_task("nope", "train", tmp_path)
    with pytest.raises(FileNotFoundError, match="no train.json"):
        load_task("tnews", "train", tmp_path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_file("tnews", tmp_path / "x.json")


# ----------------------------------------------------------------- submissions
def read_lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_classification_submission(tmp_path):
    path = clue.write_predictions("tnews", [(5, 7), (2, "100"), (9, 14)], tmp_path / "tnews_predict.json")
    assert read_lines(path) == [{"id": 5, "label": "108"}, {"id": 2, "label": "100"}, {"id": 9, "label": "116"}]
    path = clue.write_predictions("ocnli", [(0, 2), (1, 0)], tmp_path / "ocnli_predict.json")
    assert read_lines(path) == [{"id": 0, "label": "neutral"}, {"id": 1, "label": "contradiction"}]
    path = clue.write_predictions("cluewsc", [(3, 0)], tmp_path / "cluewsc_predict.json")
    assert read_lines(path) == [{"id": 3, "label": "true"}]


def test_reading_comprehension_submissions_are_one_json(tmp_path):
    path = clue.write_predictions(
        "cmrc2018", [("TEST_0_QUERY_0", "美国海军"), ("TEST_0_QUERY_1", "第二艘")], tmp_path / "cmrc2018_predict.json"
    )
    assert json.loads(path.read_text(encoding="utf-8")) == {"TEST_0_QUERY_0": "美国海军", "TEST_0_QUERY_1": "第二艘"}
    path = clue.write_predictions("c3", [("m-1-0", 2), ("m-1-1", 0)], tmp_path / "c3_predict.json")
    assert json.loads(path.read_text()) == {"m-1-0": 2, "m-1-1": 0}
    path = clue.write_predictions("chid", [("#idiom000007#", 3), ("#idiom000008#", 6)], tmp_path / "chid.json")
    assert json.loads(path.read_text()) == {"#idiom000007#": 3, "#idiom000008#": 6}


def test_fewclue_chid_and_cluener_submissions(tmp_path):
    path = clue.write_predictions("chid", [(0, 4), (6, 1)], tmp_path / "chid_predict.json")
    assert read_lines(path) == [{"id": 0, "answer": 4}, {"id": 6, "answer": 1}]
    entities = [("name", 0, 2, "彭小军"), ("address", 15, 16, "台湾"), ("name", 20, 22, "彭小军")]
    path = clue.write_predictions("cluener", [(0, entities), (1, [])], tmp_path / "cluener_predict.json")
    assert read_lines(path) == [
        {"id": 0, "label": {"name": {"彭小军": [[0, 2], [20, 22]]}, "address": {"台湾": [[15, 16]]}}},
        {"id": 1, "label": {}},
    ]


def test_submission_never_overwrites_unless_asked(tmp_path):
    path = tmp_path / "out" / "bustm_predict.json"
    clue.write_predictions("bustm", [(0, 1)], path)
    with pytest.raises(FileExistsError, match="bustm_predict.json"):
        clue.write_predictions("bustm", [(0, 0)], path)
    assert read_lines(path) == [{"id": 0, "label": "1"}]
    clue.write_predictions("bustm", [(0, 0)], path, overwrite=True)
    assert read_lines(path) == [{"id": 0, "label": "0"}]


@pytest.mark.parametrize(
    "task, records, message",
    [
        ("tnews", [(0, 15)], "record 0: label index 15 is outside 0..14"),
        ("tnews", [(0, "105")], "'105' is not in the tnews label set"),
        ("bustm", [(0, 1), (0, 0)], "duplicated ids"),
        ("chid", [("#idiom000001#", 1), (5, 2)], "mix"),
        ("cluener", [(0, [("city", 0, 1, "北京")])], "'city' is not a cluener type"),
        ("cmrc2018", [("q", 3)], "answer text"),
    ],
)
def test_invalid_submissions_write_nothing(tmp_path, task, records, message):
    path = tmp_path / "p.json"
    with pytest.raises(ValueError, match=message):
        clue.write_predictions(task, records, path)
    assert not path.exists()


# ------------------------------------------------------ arbitrary input (hypothesis)
import hypothesis  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: the field names the readers look for, so that generated records get past the first checks
FIELDS = [
    "id",
    "idx",
    "sentence",
    "sentence1",
    "sentence2",
    "label",
    "abst",
    "keyword",
    "text",
    "target",
    "span1_index",
    "span1_text",
    "span2_index",
    "span2_text",
    "content",
    "candidates",
    "answer",
    "data",
    "paragraphs",
    "context",
    "qas",
    "question",
    "answers",
    "answer_start",
    "choice",
]
KEYS = st.sampled_from(FIELDS) | st.text(max_size=4)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 40)
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(["100", "-", "entailment", "true", BLANK, "#idiom1#"])
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5), max_leaves=12
)
RECORDS = st.dictionaries(KEYS, VALUES, max_size=7) | VALUES
LINES = st.lists(
    RECORDS.map(lambda r: json.dumps(r, ensure_ascii=False).encode("utf-8"))
    | st.binary(max_size=16).filter(lambda b: b"\n" not in b),
    max_size=6,
)
LINE_TASKS = [name for name, spec in TASKS.items() if spec.form not in ("cmrc2018", "c3")]
DOCUMENT_TASKS = [name for name, spec in TASKS.items() if spec.form in ("cmrc2018", "c3")]


def _reads_or_names_the_file(task, path, labelled, lines=None):
    """load_file gives examples with consistent counts, or an error naming the file; never anything else."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MalformedRecordWarning)
            examples, stats = load_file(task, path, labelled=labelled)
    except (ValueError, FileNotFoundError) as error:  # a wrong label, a chid record without its answers ...
        assert str(path.parent) in str(error), (task, error)
        return
    assert stats.examples == len(examples) and stats.malformed == len(stats.problems)
    assert stats.malformed + sum(n for r, n in stats.skipped.items() if r != "blank lines") <= stats.records
    if lines is not None:
        assert stats.records + stats.skipped["blank lines"] == len(lines)
    for example in examples:
        assert labelled or getattr(example, "label", None) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=LINES, labelled=st.booleans())
# json's 4300-digit limit and nesting too deep: ValueError / RecursionError naming no file
@hypothesis.example(lines=[b'{"sentence": "a", "label": ' + b"1" * 5000 + b"}", b"[" * 100000], labelled=True)
def test_arbitrary_json_lines_are_counted_skips_or_errors_naming_the_file(tmp_path_factory, lines, labelled):
    folder = tmp_path_factory.mktemp("lines")
    path = folder / "data.json"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    for task in LINE_TASKS:
        _reads_or_names_the_file(task, path, labelled, lines)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=VALUES | st.fixed_dictionaries({"data": st.lists(VALUES, max_size=3)}), labelled=st.booleans())
def test_arbitrary_json_documents_are_counted_skips_or_errors_naming_the_file(tmp_path_factory, document, labelled):
    folder = tmp_path_factory.mktemp("document")
    path = folder / "data.json"
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    for task in DOCUMENT_TASKS:
        _reads_or_names_the_file(task, path, labelled)


def test_a_number_beyond_jsons_digit_limit_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "d-dev.json"
    path.write_text('[[["a"], [], ' + "1" * 5000 + "]]", encoding="utf-8")  # was a ValueError naming no file
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: unreadable JSON \(Exceeds the limit"):
        load_file("c3", path)


def test_the_summary_is_logged_once_and_not_as_a_warning(tmp_path, caplog):
    path = tmp_path / "dev.json"
    path.write_text('{"sentence": "x", "label": "100"}\n{"sentence": \n', encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MalformedRecordWarning)
        load_task("tnews", "dev", tmp_path)
    summaries = [r for r in caplog.records if "examples from" in r.getMessage()]
    assert all(r.levelname == "INFO" for r in summaries)  # a WARNING reached the console beside the print
