"""Segmenters: the shared interface on jieba, LAC when it is installed."""

import importlib.util
import os
import subprocess
import sys

import pytest

from gau_keras import segmenters
from gau_keras.segmenters import JiebaSegmenter, Segmenter, get_segmenter

TEXTS = ["我爱北京天安门", "", "Hello world，2023年  ok", "百度是一家高科技公司"]

lac_missing = importlib.util.find_spec("LAC") is None or importlib.util.find_spec("paddle") is None


def _check_words(texts, words):
    assert len(words) == len(texts)
    for text, text_words in zip(texts, words):
        assert all(isinstance(w, str) and w.strip() for w in text_words)
        assert "".join(text_words) == "".join(text.split())


def test_jieba_interface():
    segmenter = get_segmenter("jieba")
    assert isinstance(segmenter, Segmenter) and segmenter.name == "jieba"
    words = segmenter.segment(TEXTS)
    _check_words(TEXTS, words)
    assert words[0] == ["我", "爱", "北京", "天安门"]
    assert words[1] == []
    assert "2023" in words[2] and "Hello" in words[2]


def test_jieba_user_dict(tmp_path):
    path = tmp_path / "user.txt"
    path.write_text("爱北 100000000\n", encoding="utf-8")
    with JiebaSegmenter(user_dict=str(path)) as segmenter:
        assert "爱北" in segmenter.segment(["我爱北京"])[0]


def test_unknown_segmenter_names_choices():
    with pytest.raises(ValueError, match="'jieba', 'lac'"):
        get_segmenter("thulac")


def test_missing_lac_says_how_to_install(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "LAC" else real_find_spec(name, *a)
    )
    with pytest.raises(ImportError, match="pip install --no-build-isolation lac"):
        get_segmenter("lac")


@pytest.mark.skipif(lac_missing, reason="LAC / paddlepaddle not installed (optional extra, see README)")
def test_lac_in_worker_process():
    # this pytest process has imported TensorFlow (conftest), so LAC must run elsewhere
    with get_segmenter("lac", processes=1, batch_size=2) as segmenter:
        words = segmenter.segment(TEXTS)
    _check_words(TEXTS, words)
    assert words[3] == ["百度", "是", "一家", "高科技", "公司"]
    assert "paddle" not in sys.modules


@pytest.mark.skipif(lac_missing, reason="LAC / paddlepaddle not installed (optional extra, see README)")
def test_lac_in_process_refuses_after_tensorflow():
    import tensorflow  # noqa: F401

    with pytest.raises(RuntimeError, match="segfaults"):
        segmenters.LACModel()


@pytest.mark.skipif(lac_missing, reason="LAC / paddlepaddle not installed (optional extra, see README)")
def test_lac_in_process_full_width_input():
    code = (
        "from gau_keras.segmenters import get_segmenter;"
        "print('|'.join(get_segmenter('lac', in_process=True).segment(['ＬＡＣ是个优秀的分词工具'])[0]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, GAU_KERAS_TF_FREE="1"),
    ).stdout
    words = out.strip().splitlines()[-1].split("|")
    assert "".join(words) == "ＬＡＣ是个优秀的分词工具"
    assert "分词" in words or "分词工具" in words


LAC_TEXTS = ["百度是一家高科技公司", "我爱北京天安门", "", "ＬＡＣ是个优秀的分词工具，2023年 ok"]
REFERENCE_LAC = """
import json, sys
from gau_keras.segmenters import get_segmenter, install_fluid_shim
install_fluid_shim()
from LAC import LAC
texts = json.loads(sys.argv[1])
seg, lac = LAC(mode="seg"), LAC(mode="lac")
# list(texts): the real LAC removes the empty texts from the list it is given
print(json.dumps({"seg": [seg.run(list(texts)), seg.run(texts[0])], "lac": [lac.run(list(texts)), lac.run(texts[1])],
                  "ours": get_segmenter("lac", in_process=True).segment(texts)}))
"""


@pytest.mark.skipif(lac_missing, reason="LAC / paddlepaddle not installed (optional extra, see README)")
def test_lac_drop_in_matches_the_real_lac_in_a_tensorflow_process():
    import json

    import tensorflow  # noqa: F401   (the drop-in's reason to exist)

    from gau_keras.segmenters import LAC

    out = subprocess.run(
        [sys.executable, "-c", REFERENCE_LAC, json.dumps(LAC_TEXTS)],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, GAU_KERAS_TF_FREE="1"),
    ).stdout
    expected = json.loads(out.strip().splitlines()[-1])
    with LAC(mode="seg") as seg:
        assert seg.run(LAC_TEXTS) == expected["seg"][0]
        assert seg.run(LAC_TEXTS[0]) == expected["seg"][0][0] == ["百度", "是", "一家", "高科技", "公司"]
    # the real LAC's seg mode and the corpus pipeline's own runner of the same model agree
    assert [[w for w in words if w.strip()] for words in expected["seg"][0]] == expected["ours"]
    lac = LAC(mode="lac")
    words, tags = lac.run(LAC_TEXTS[1])
    assert [words, tags] == expected["lac"][1] and len(words) == len(tags) and "LOC" in tags
    assert lac.run(LAC_TEXTS) == expected["lac"][0]
    lac.add_word("北京天安门/LOC")
    assert lac.run("我爱北京天安门")[0][-1] == "北京天安门"
    lac.close()
    with pytest.raises(RuntimeError, match="closed"):
        lac.run("x")
    with pytest.raises(ValueError, match="mode"):
        LAC(mode="pos")
    assert "paddle" not in sys.modules
