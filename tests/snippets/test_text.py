"""gau_keras.snippets.text (bert4keras parity: tests/snippets/test_parity.py)."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gau_keras.snippets import text


def test_strq2b_maps_full_width_to_half_width():
    assert text.strQ2B("ＡＢＣ１２３！？\u3000ｘ") == "ABC123!? x"
    assert text.strQ2B("中文，。") == "中文,。"  # U+FF0C is full width, U+3002 is not


def test_is_string_and_conversions():
    assert text.is_string("a") and not text.is_string(b"a") and not text.is_string(None)
    assert text.convert_to_unicode("中".encode()) == "中"
    assert text.convert_to_str(b"\xffok") == "ok"  # errors='ignore'
    assert text.convert_to_str(3) == 3
    assert text.is_py2 is False and text.basestring is str


def test_string_matching_takes_regular_expressions():
    assert text.string_matching("price: 12 yuan", [r"\d+ yuan"])
    assert not text.string_matching("abc", ["^b", "z"])
    assert not text.string_matching("abc", [])


def test_lowercase_and_normalize_drops_accents():
    assert text.lowercase_and_normalize("ÉCOLE Über") == "ecole uber"


def test_is_one_of_uses_identity():
    import numpy as np

    a = np.ones(3)
    assert text.is_one_of(a, [None, a])
    assert not text.is_one_of(a, [np.ones(3)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["ab", "cde", "f", "ghij", "，", "。", "\n"]), max_size=30), st.integers(1, 12))
def test_text_segmentate_keeps_the_text(parts, maxlen):
    source = "".join(parts).strip()
    pieces = text.text_segmentate(source, maxlen, seps="\n。，")
    # nothing is lost but the whitespace each piece is stripped of
    assert "".join(pieces).replace("\n", "") == source.replace("\n", "")
    assert all(piece == piece.strip() for piece in pieces)


def test_text_segmentate_strips():
    assert text.text_segmentate("  甲。乙。  ", 100, "。", "。") == ["甲。乙"]
    assert text.text_segmentate("甲乙丙。丁戊己。", 4, "。", "。") == ["甲乙丙", "丁戊己"]


def test_truncate_sequences_pops_from_the_longest_in_place():
    a, b, empty = [1, 2, 3, 4, 5], [6, 7, 8], []
    kept = text.truncate_sequences(5, -1, a, empty, b)
    assert kept == [[1, 2], [6, 7, 8]] and kept[0] is a and kept[1] is b
    a, b = [0, 1, 2, 3, 9], [5, 6, 9]
    assert text.truncate_sequences(4, [-2, 0], a, b) == [[0, 9], [6, 9]]  # ties: the first


def _brute_substring(a, b):
    return max([0] + [n for i in range(len(a)) for n in range(1, len(a) - i + 1) if a[i : i + n] in b])


def _is_subsequence(sub, seq):
    it = iter(seq)
    return all(item in it for item in sub)


@settings(max_examples=80, deadline=None)
@given(st.text("abc", max_size=8), st.text("abc", max_size=8))
def test_longest_common_parts_are_longest(a, b):
    length, (i0, i1, j0, j1) = text.longest_common_substring(a, b)
    assert length == _brute_substring(a, b)
    assert a[i0:i1] == b[j0:j1] and i1 - i0 == length
    length, mapping = text.longest_common_subsequence(a, b)
    best = max([0] + [n for n in range(len(a) + 1) for c in itertools.combinations(a, n) if _is_subsequence(c, b)])
    assert length == best == len(mapping)
    assert all(a[i] == b[j] for i, j in mapping)
    assert all(i < k and j < m for (i, j), (k, m) in zip(mapping, mapping[1:]))
