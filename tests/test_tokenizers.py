"""Tokenizer: bert4keras behaviour on a hand-made vocab and on the GAU-α vocab."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gau_keras.tokenizers import (
    Tokenizer,
    is_dropped,
    load_vocab,
    lowercase_and_normalize,
    lowercase_and_strip_accents,
    lowercase_per_character,
    strip_accents,
    truncate_sequences,
)

TINY_TOKENS = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "你",
    "好",
    "世",
    "界",
    "hello",
    "world",
    "un",
    "##aff",
    "##able",
    "!",
    ",",
    "，",
    "12",
    "##3",
    "cafe",
    "[unused1]",
    "##好",
    "你好",
]


@pytest.fixture
def tiny():
    return Tokenizer({t: i for i, t in enumerate(TINY_TOKENS)}, do_lower_case=True)


@pytest.fixture
def real(shared_data):
    return Tokenizer(str(shared_data / "vocab" / "gau_alpha_vocab.txt"), do_lower_case=True)


def test_special_ids(tiny):
    assert (tiny._token_pad_id, tiny._token_unk_id, tiny._token_cls_id, tiny._token_sep_id, tiny._token_mask_id) == (
        0,
        1,
        2,
        3,
        4,
    )
    assert (tiny.token_pad_id, tiny.token_start_id, tiny.token_end_id) == (0, 2, 3)
    assert tiny.vocab_size == len(TINY_TOKENS)


def test_mixed_text_tiny(tiny):
    text = "你好，HELLO World! unaffable 123 Café 😀"
    tokens = tiny.tokenize(text)
    assert tokens == [
        "[CLS]",
        "你",
        "好",
        "，",
        "hello",
        "world",
        "!",
        "un",
        "##aff",
        "##able",
        "12",
        "##3",
        "cafe",
        "😀",
        "[SEP]",
    ]
    ids, segments = tiny.encode(text)
    assert ids == [2, 5, 6, 16, 9, 10, 14, 11, 12, 13, 17, 18, 19, 1, 3]
    assert segments == [0] * len(ids)


def test_unknown_word_is_one_unk_token(tiny):
    # no piece covers "zz": the whole word is kept as one token that maps to [UNK]
    assert tiny.tokenize("unzz") == ["[CLS]", "unzz", "[SEP]"]
    assert tiny.encode("unzz")[0] == [2, 1, 3]


def test_no_lower_case(tiny):
    cased = Tokenizer(tiny.token_dict, do_lower_case=False)
    assert cased.tokenize("Hello hello")[1:-1] == ["Hello", "hello"]
    assert cased.encode("Hello")[0] == [2, 1, 3]


def test_control_and_space_characters(tiny):
    assert tiny.tokenize("你\u200b好\t\u3000世\x00界\ufffd")[1:-1] == ["你", "好", "世", "界"]


def test_truncation_single(tiny):
    assert tiny.tokenize("你好世界", maxlen=4) == ["[CLS]", "你", "好", "[SEP]"]
    assert tiny.encode("你好世界", maxlen=4)[0] == [2, 5, 6, 3]
    # truncate_from='left' drops right after [CLS]
    assert tiny.encode("你好世界", maxlen=4, truncate_from="left")[0] == [2, 7, 8, 3]


def test_truncation_pair_pops_from_longer(tiny):
    # first: CLS 你 好 世 界 SEP (6), second: CLS hello SEP (3, CLS dropped -> 2)
    ids, segments = tiny.encode("你好世界", "hello", maxlen=6)
    assert ids == [2, 5, 6, 3, 9, 3]
    assert segments == [0, 0, 0, 0, 1, 1]
    # when the second text is longer it loses tokens first
    ids, segments = tiny.encode("你", "你好世界", maxlen=7)
    assert ids == [2, 5, 3, 5, 6, 7, 3]
    assert segments == [0, 0, 0, 1, 1, 1, 1]
    # the S*ES*E pattern keeps the second [CLS]
    ids, _ = tiny.encode("你", "好", pattern="S*ES*E")
    assert ids == [2, 5, 3, 2, 6, 3]


def test_class_level_character_tests():
    assert Tokenizer._is_cjk_character("中") and not Tokenizer._is_cjk_character("a")
    assert Tokenizer._is_punctuation("，") and Tokenizer._is_punctuation("$")
    assert Tokenizer.stem("##ing") == "ing" and Tokenizer._is_special("[CLS]")
    assert Tokenizer._is_redundant("##中") and not Tokenizer._is_redundant("##ing")


def test_truncate_sequences_ties_pop_first():
    a, b = [1, 2, 3], [4, 5, 6]
    truncate_sequences(4, -1, a, b)
    assert (a, b) == ([1, 2], [4, 5])


def test_ids_tokens_roundtrip(tiny):
    ids = [2, 5, 6, 3]
    assert tiny.ids_to_tokens(ids) == ["[CLS]", "你", "好", "[SEP]"]
    assert tiny.tokens_to_ids(["你", "nope"]) == [5, 1]
    assert tiny.id_to_token(9) == "hello" and tiny.token_to_id("hello") == 9


def test_decode(tiny):
    ids = tiny.encode("你好，hello world! unaffable 123")[0]
    assert tiny.decode(ids) == "你好，hello world! unaffable 123"


def test_rematch_accents_and_spaces(tiny):
    text = " Café,你好 unaffable"
    tokens = tiny.tokenize(text)
    mapping = tiny.rematch(text, tokens)
    assert mapping == [[], [1, 2, 3, 4], [5], [6], [7], [9, 10], [11, 12, 13], [14, 15, 16, 17], []]
    # every mapped span, lower-cased and accent-stripped, spells the token
    for token, span in zip(tokens, mapping):
        if span:
            covered = "".join(text[i] for i in span).lower().replace("é", "e")
            assert covered == token.replace("##", "")


def test_rematch_rejects_foreign_tokens(tiny):
    with pytest.raises(ValueError, match="not found"):
        tiny.rematch("你好", ["世"])


def test_pre_tokenize_keeps_vocab_words(tiny):
    tok = Tokenizer(tiny.token_dict, pre_tokenize=lambda text: ["你好", "世界"])
    assert tok.tokenize("你好世界")[1:-1] == ["你好", "世", "界"]


def test_load_vocab_simplified(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text(
        "\n".join(["[PAD]", "[UNK]", "你", "你好", "##好", "a", "##b", "a,", "[CLS]"]) + "\n", encoding="utf-8"
    )
    assert load_vocab(path)["[CLS]"] == 8
    token_dict, keep = load_vocab(path, simplified=True, startswith=["[PAD]", "[UNK]", "[CLS]"])
    assert list(token_dict) == ["[PAD]", "[UNK]", "[CLS]", "你", "a", "##b"]
    assert keep == [0, 1, 8, 2, 5, 6]


HF_BERT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf", "bert")


def test_load_vocab_reads_a_wordpiece_tokenizer_json():
    """A fast BERT tokenizer's tokenizer.json (written by transformers from the fixture's vocab.txt)."""
    assert load_vocab(os.path.join(HF_BERT, "tokenizer.json")) == load_vocab(os.path.join(HF_BERT, "vocab.txt"))


def test_load_vocab_refuses_a_tokenizer_json_of_another_model(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"tokenizer.json: a 'BPE' tokenizer; only a WordPiece tokenizer.json"):
        load_vocab(path)
    path.write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0, "b": 2}}}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"tokenizer.json: the token ids are not 0 .. 1, each once"):
        load_vocab(path)


def test_load_vocab_duplicate_names_line(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("a\nb\na\n", encoding="utf-8")
    with pytest.raises(ValueError, match="vocab.txt:3"):
        load_vocab(path)


def test_real_vocab_mixed(real):
    text = "GAU-α在2022年发布，Hello World！😀 café"
    tokens = real.tokenize(text)
    assert tokens == [
        "[CLS]",
        "ga",
        "##u",
        "-",
        "α",
        "在",
        "2022",
        "年",
        "发",
        "布",
        "，",
        "hello",
        "world",
        "！",
        "😀",
        "cafe",
        "[SEP]",
    ]
    ids, segments = real.encode(text)
    assert ids[:4] == [101, real.token_to_id("ga"), real.token_to_id("##u"), real.token_to_id("-")]
    assert ids[4] == ids[14] == 100 and ids[-1] == 102  # α and 😀 are not in the vocab
    assert real.token_to_id("[MASK]") == 103 and real.vocab_size == 12000
    mapping = real.rematch(text, tokens)
    assert [text[i] for i in mapping[tokens.index("在")]] == ["在"]
    assert "".join(text[i] for i in mapping[tokens.index("hello")]) == "Hello"
    assert real.decode(ids) == "gau-在2022年发布，hello world！cafe"


def test_real_vocab_truncation(real):
    ids, segments = real.encode("今天天气很好", "明天下雨", maxlen=8)
    assert len(ids) == 8
    # lengths 8 and 6 (5 without its [CLS]): pop from the longer, the first one on ties
    assert real.ids_to_tokens(ids) == ["[CLS]", "今", "天", "[SEP]", "明", "天", "下", "[SEP]"]
    assert segments == [0] * 4 + [1] * 4


def test_import_does_not_load_tensorflow_in_tf_free_processes():
    code = "import sys, gau_keras.tokenizers, gau_keras.segmenters; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, GAU_KERAS_TF_FREE="1"))


# -- cases from careful use (issue: faults and bad input) -----------------------
EDGE_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "οδος",
    "ας",
    "cafe",
    "istanbul",
    "한",
    "국",
    "##국",
    "中",
    "国",
]
EDGE_TEXTS = ["ΟΔΟΣ", "ΟΔΟΣ ΑΣ.", "CAFÉ 中国", "İstanbul", "ﬁne", "ΣΑΣ σας"]


def _edge_tokenizer():
    return Tokenizer({token: i for i, token in enumerate(EDGE_VOCAB)}, do_lower_case=True)


def test_rematch_after_whole_text_lowering_final_sigma():
    tokenizer = _edge_tokenizer()
    tokens = tokenizer.tokenize("ΟΔΟΣ")
    assert tokens == ["[CLS]", "οδος", "[SEP]"]  # lower() of the whole text: final ς
    assert tokenizer.rematch("ΟΔΟΣ", tokens) == [[], [0, 1, 2, 3], []]
    tokens = tokenizer.tokenize("ΣΑΣ σας")
    assert tokenizer.rematch("ΣΑΣ σας", tokens)[1:-1] == [[0, 1, 2], [4, 5, 6]]


def test_rematch_indexes_the_original_text():
    tokenizer = _edge_tokenizer()
    # "İ".lower() is two characters ("i" + a combining dot): indices still point into the input
    assert tokenizer.rematch("İstanbul", tokenizer.tokenize("İstanbul"))[1] == list(range(8))


def test_hangul_syllables_stay_syllables():
    tokenizer = _edge_tokenizer()
    tokens = tokenizer.tokenize("한국")
    assert tokens == ["[CLS]", "한", "##국", "[SEP]"]  # NFD alone would leave jamo: [UNK]
    assert tokenizer.rematch("한국", tokens) == [[], [0], [1], []]


def test_vocab_encoding_and_empty_file_errors_name_the_file(tmp_path):
    gbk = tmp_path / "vocab_gbk.txt"
    gbk.write_bytes("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "中", "国"]).encode("gbk"))
    with pytest.raises(ValueError, match=r"vocab_gbk\.txt.*not utf-8.*encoding='gbk'"):
        load_vocab(str(gbk))
    assert load_vocab(str(gbk), encoding="gbk")["国"] == 5
    assert Tokenizer(str(gbk), encoding="gbk").tokenize("中国") == ["[CLS]", "中", "国", "[SEP]"]
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty\.txt is empty"):
        Tokenizer(str(empty))


# -- bert4keras's private attributes and issue 25's bad input ---------------------------
def test_private_attributes_scripts_read(tiny):
    assert tiny._vocab_size == len(TINY_TOKENS) and tiny._do_lower_case is True
    assert (tiny._token_start, tiny._token_end) == ("[CLS]", "[SEP]")
    assert (tiny._token_start_id, tiny._token_end_id) == (2, 3)
    assert tiny._token_dict_inv[9] == "hello" and tiny._token_dict["hello"] == 9
    assert tiny._tokenize("你好!") == ["你", "好", "!"] and tiny._is_special("[unused1]")
    assert Tokenizer.stem("##able") == "able" and "\u3002" in Tokenizer._cjk_punctuation()


def test_maxlen_without_room_for_special_tokens(tiny):
    assert tiny.encode("你好", maxlen=2)[0] == [2, 3]  # bert4keras: the text is emptied
    assert tiny.encode("你好", "世界", maxlen=3)[0] == [2, 3, 3]
    for maxlen in (1, 0, -1):
        with pytest.raises(ValueError, match=f"maxlen={maxlen} .*>= 2"):
            tiny.encode("你好", maxlen=maxlen)
        with pytest.raises(ValueError, match=f"maxlen={maxlen} "):
            tiny.tokenize("你好", maxlen=maxlen)
    with pytest.raises(ValueError, match="maxlen=2 .*>= 3"):
        tiny.encode("你好", "世界", maxlen=2)
    with pytest.raises(ValueError, match="maxlen=3 .*>= 4"):
        tiny.encode("你好", "世界", maxlen=3, pattern="S*ES*E")
    assert tiny.encode(["你", "好"], maxlen=1)[0] == [6]  # token lists: as given (pops at -2, as bert4keras)


def test_unknown_id_names_the_id_and_the_vocab_size(tiny):
    for bad in (len(TINY_TOKENS), -1, 10**6):
        with pytest.raises(KeyError, match=f"id {bad} is not in the vocab \\({len(TINY_TOKENS)} tokens"):
            tiny.decode([2, bad])
        with pytest.raises(ValueError, match=f"id {bad} "):
            tiny.id_to_token(bad)


# -- parity with bert4keras's Tokenizer on real text (ONE reference call) ---------------------
PARITY_SNIPPET = r"""
import json
from bert4keras.tokenizers import Tokenizer
job = json.loads(str(inputs["job"]))
results = {}
for name, (vocab, texts) in job.items():
    t = Tokenizer({tok: i for i, tok in enumerate(vocab)}, do_lower_case=True)
    rows = []
    for a, b in zip(texts, texts[1:] + texts[:1]):
        tokens = t.tokenize(a)
        ids = t.encode(a)[0]
        rows.append([tokens, t.rematch(a, tokens), t.decode(ids), ids,
                     t.encode(a, maxlen=16), t.encode(a, maxlen=16, truncate_from="left"),
                     t.encode(a, b, maxlen=24), t.encode(a, b, maxlen=24, truncate_from="left"),
                     t.encode(a, b, maxlen=30, pattern="S*ES*E"), t.tokenize(a, maxlen=10)])
    results[name] = rows
outputs["json"] = np.array(json.dumps(results))
"""


def _parity_texts(shared):
    lines = []
    if shared is not None:
        with open(shared / "corpus" / "zh_corpus.txt", encoding="utf-8") as f:
            lines = [line.rstrip("\n")[:120] for i, line in zip(range(30000), f) if i % 100 == 0]
    return (
        lines
        + EDGE_TEXTS[:2]
        + EDGE_TEXTS[3:]
        + ["GAU-α在2022年发布，Hello World！😀 café 3.14 don't", "  多个  空格\t和\n换行 ", "ＬＡＣ全角１２３", ""]
    )


@pytest.fixture(scope="module")
def parity(request):
    from gau_keras.pretrained import default_model_dir
    from tests.conftest import SHARED_DATA
    from tests.reference.harness import run_bert4keras_code

    shared = SHARED_DATA if SHARED_DATA.is_dir() else None
    texts = _parity_texts(shared)
    vocabs = {"edge": EDGE_VOCAB, "bundled": list(load_vocab(os.path.join(default_model_dir(), "vocab.txt")))}
    if shared is not None:
        vocabs["gau_alpha"] = list(load_vocab(str(shared / "vocab" / "gau_alpha_vocab.txt")))
    job = {name: (vocab, texts) for name, vocab in vocabs.items()}
    out = run_bert4keras_code(PARITY_SNIPPET, {"job": np.array(json.dumps(job))})
    return job, json.loads(str(out["json"]))


@pytest.mark.parametrize("vocab", ["gau_alpha", "bundled", "edge"])
def test_parity_with_bert4keras(parity, vocab):
    job, expected = parity
    if vocab not in job:
        pytest.skip("../shared/data is absent: the GAU-α vocab and corpus lines are not available")
    tokens_vocab, texts = job[vocab]
    t = Tokenizer({tok: i for i, tok in enumerate(tokens_vocab)}, do_lower_case=True)
    checked = 0
    for a, b, row in zip(texts, texts[1:] + texts[:1], expected[vocab]):
        if a == "İstanbul":
            continue  # bert4keras's rematch indexes its lowered text (one character longer after "İ")
        tokens = t.tokenize(a)
        ids = t.encode(a)[0]
        got = [
            tokens,
            t.rematch(a, tokens),
            t.decode(ids),
            ids,
            t.encode(a, maxlen=16),
            t.encode(a, maxlen=16, truncate_from="left"),
            t.encode(a, b, maxlen=24),
            t.encode(a, b, maxlen=24, truncate_from="left"),
            t.encode(a, b, maxlen=30, pattern="S*ES*E"),
            t.tokenize(a, maxlen=10),
        ]
        got = json.loads(json.dumps(got))  # tuples -> lists, as the reference returns them
        assert got == row, a
        checked += 1
    assert checked >= len(texts) - 1


# -- property tests: arbitrary Unicode ---------------------------------------------------------
@pytest.fixture(scope="module")
def bundled_tokenizer():
    from gau_keras.pretrained import default_model_dir

    return Tokenizer(os.path.join(default_model_dir(), "vocab.txt"), do_lower_case=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=40))
def test_rematch_maps_every_token_to_its_span(bundled_tokenizer, text):
    """For every token of tokenize(text): [CLS]/[SEP] map to []; every other
    token (an [UNK] word too: it stays its own text) maps to a non-empty,
    strictly increasing list of indices of ``text``, the spans in text order
    (consecutive tokens may share one character that normalises to several),
    and the token's stem is in what those characters normalise to."""
    for tokenizer in (bundled_tokenizer, Tokenizer(bundled_tokenizer.token_dict, do_lower_case=False)):
        characters = list(text)
        if tokenizer._do_lower_case:  # as tokenize normalises: the whole text lowered, accents stripped
            characters = [strip_accents(c) for c in lowercase_per_character(text)]
        characters = ["".join(c for c in piece if not is_dropped(c)) for piece in characters]
        tokens = tokenizer.tokenize(text)
        mapping = tokenizer.rematch(text, tokens)
        assert len(mapping) == len(tokens)
        assert mapping[0] == [] and mapping[-1] == [] and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        previous = -1
        for token, indices in zip(tokens[1:-1], mapping[1:-1]):
            assert indices and indices == sorted(set(indices)) and 0 <= indices[0] and indices[-1] < len(text)
            assert indices[0] >= previous
            previous = indices[-1]
            span = "".join(characters[indices[0] : indices[-1] + 1])
            assert Tokenizer.stem(token) in span, (token, span)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first=st.text(max_size=30),
    second=st.one_of(st.none(), st.text(max_size=30)),
    maxlen=st.integers(3, 40),
    side=st.sampled_from(["right", "left"]),
)
def test_encode_decode_never_raise_and_respect_maxlen(bundled_tokenizer, first, second, maxlen, side):
    t = bundled_tokenizer
    ids, segments = t.encode(first, second, maxlen=maxlen, truncate_from=side)
    assert len(ids) == len(segments) <= maxlen
    assert ids[0] == t.token_start_id and ids[-1] == t.token_end_id
    assert segments == sorted(segments) and set(segments) <= {0, 1}
    assert isinstance(t.decode(ids), str)
    assert t.decode(t.encode(first)[0]) == t.decode(t.tokens_to_ids(t.tokenize(first)))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.integers(0, 5886), max_size=30))
def test_decode_of_any_vocab_ids_is_text(bundled_tokenizer, ids):
    text = bundled_tokenizer.decode(ids)
    assert isinstance(text, str) and text == text.strip()


def test_default_keeps_case_as_bert4keras():
    """bert4keras's Tokenizer lower-cases only when asked (do_lower_case=False by default)."""
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "##b", "A", "##B"])}
    assert Tokenizer(vocab).tokenize("AB") == ["[CLS]", "A", "##B", "[SEP]"]
    assert Tokenizer(vocab, do_lower_case=True).tokenize("AB") == ["[CLS]", "a", "##b", "[SEP]"]


def test_bert4keras_normalisation_and_the_tokenizers_differ_in_recomposition_only():
    """``lowercase_and_normalize`` is bert4keras's (tokenizers and snippets share it): Hangul
    stays decomposed into jamo. The Tokenizer's ``lowercase_and_strip_accents`` recomposes, so
    a syllable in the vocab is found as it is; accents go in both."""
    import unicodedata

    from gau_keras import snippets

    assert snippets.lowercase_and_normalize is lowercase_and_normalize
    assert snippets.truncate_sequences is truncate_sequences
    text = "ÉCOLE Über 中文"
    assert lowercase_and_normalize(text) == lowercase_and_strip_accents(text) == "ecole uber 中文"
    assert lowercase_and_normalize("한") == unicodedata.normalize("NFD", "한")
    assert len(lowercase_and_normalize("한")) == 3
    assert lowercase_and_strip_accents("한") == "한"


# ---------------------------------------------------------------- bad input, long input (issue 36)


def test_bytes_are_read_as_utf8_and_other_types_named(tiny):
    assert tiny.encode("你好".encode()) == tiny.encode("你好")
    assert tiny.encode("hello", second_text="世界".encode()) == tiny.encode("hello", second_text="世界")
    assert tiny.tokenize(b"hello") == tiny.tokenize("hello")
    with pytest.raises(ValueError, match="first_text is bytes that are not UTF-8"):
        tiny.encode(b"\xff\xfe")
    for bad in (None, 123, 4.5, {"a": 1}):
        with pytest.raises(TypeError, match=r"first_text must be a str \(or a list of token strings\), got"):
            tiny.encode(bad)
    with pytest.raises(TypeError, match="second_text must be a str"):
        tiny.encode("hello", second_text=7)
    assert tiny.encode(["[CLS]", "hello", "[SEP]"])[0] == [2, 9, 3]  # a token list, as bert4keras takes


_PIECES = st.sampled_from(
    [
        "hello",
        "world",
        "unaffable",
        " ",
        "  ",
        "你",
        "好",
        "世界",
        "！",
        ",",
        "Café",
        "ΣΑΣ",
        "12",
        "123",
        "\t",
        "é",
        "x",
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first=st.lists(_PIECES, min_size=0, max_size=120).map("".join),
    second=st.one_of(st.none(), st.lists(_PIECES, max_size=120).map("".join)),
    maxlen=st.integers(3, 12),
)
def test_long_texts_truncate_as_if_tokenized_whole(tiny, first, second, maxlen):
    """Under right truncation a long text is tokenized only as far as maxlen needs; the ids are
    those of tokenizing it whole (a token list is truncated the same way)."""
    whole = (tiny.tokenize(first), None if second is None else tiny.tokenize(second))
    assert tiny.encode(first, second, maxlen=maxlen) == tiny.encode(whole[0], whole[1], maxlen=maxlen)


def test_a_long_document_is_not_tokenized_whole(tiny, monkeypatch):
    calls = []
    original = Tokenizer._tokenize

    def counting(self, text, *args):
        calls.append(len(text))
        return original(self, text, *args)

    monkeypatch.setattr(Tokenizer, "_tokenize", counting)
    ids, _ = tiny.encode("你好世界 " * 250_000, maxlen=16)
    assert len(ids) == 16 and max(calls) < 10_000, calls


def test_a_cut_before_punctuation_could_change_a_final_sigma():
    """ "ΘΕΟΣ.Ο".lower() keeps σ (the "." is case-ignorable, a letter follows), "ΘΕΟΣ".lower()
    ends in ς: the long-text path cuts only before a space or a CJK character."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a" * 100, "θ", "##θ", "##ς", "θ" * 19 + "σ", ".", "ο"]
    tokenizer = Tokenizer({t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    text = "a" * 100 + " " + "Θ" * 19 + "Σ" + ".Ο"
    assert tokenizer.encode(text, maxlen=10) == tokenizer.encode(tokenizer.tokenize(text), maxlen=10)
