"""String helpers of bert4keras's snippets: type checks, width normalisation,
keyword matching, sentence splitting and the two longest-common-part searches.
``lowercase_and_normalize`` and ``truncate_sequences`` are the tokenizer's own
(``gau_keras.tokenizers``), re-exported under bert4keras's snippets names.
"""

import re

import numpy as np

from gau_keras.tokenizers import lowercase_and_normalize, truncate_sequences  # noqa: F401

#: bert4keras's flag for Python 2; always False here
is_py2 = False
#: Python 2's string base class, as bert4keras re-exports it
basestring = str

_FULL_WIDTH_SPACE = 0x3000
_FULL_WIDTH_FIRST, _FULL_WIDTH_LAST = 0xFF01, 0xFF5E
_FULL_TO_HALF_OFFSET = 0xFEE0


def is_string(s):
    """True for a ``str`` (bytes are not strings here, as in bert4keras on Python 3)."""
    return isinstance(s, str)


def strQ2B(ustring):
    """Full-width characters to their half-width forms.

    U+3000 (ideographic space) becomes a plain space, U+FF01..U+FF5E shift down
    to ASCII ``!``..``~``; everything else is kept.
    """

    def half(ch):
        code = ord(ch)
        if code == _FULL_WIDTH_SPACE:
            return " "
        if _FULL_WIDTH_FIRST <= code <= _FULL_WIDTH_LAST:
            return chr(code - _FULL_TO_HALF_OFFSET)
        return ch

    return "".join(half(ch) for ch in ustring)


def string_matching(s, keywords):
    """True when at least one of ``keywords`` (regular expressions) is found in ``s``."""
    return any(re.search(pattern, s) for pattern in keywords)


def convert_to_unicode(text, encoding="utf-8", errors="ignore"):
    """``bytes`` decoded with ``encoding``; anything else is returned as it is."""
    if isinstance(text, bytes):
        return text.decode(encoding, errors=errors)
    return text


def convert_to_str(text, encoding="utf-8", errors="ignore"):
    """The same as ``convert_to_unicode`` on Python 3 (``str`` is unicode)."""
    return convert_to_unicode(text, encoding, errors)


def is_one_of(x, ys):
    """``x in ys`` by identity: safe for arrays and tensors, whose ``==`` is element-wise."""
    return any(x is y for y in ys)


def text_segmentate(text, maxlen, seps="\n", strips=None):
    """Splits ``text`` into pieces of at most ``maxlen`` characters where it can.

    The text (stripped of whitespace, then of ``strips``) is cut at ``seps[0]``
    and the parts are greedily joined back while they fit (each keeps its
    separator); a piece still too long is cut with the next separator, and so
    on. A piece with no separator left stays whole even when longer.
    Returns the list of pieces.
    """
    text = text.strip().strip(strips)
    if not seps or len(text) <= maxlen:
        return [text]
    sep, finer = seps[0], seps[1:]
    parts = text.split(sep)
    pieces, current = [], ""
    for position, part in enumerate(parts):
        if current and part and len(current) + len(part) > maxlen - 1:
            pieces += text_segmentate(current, maxlen, finer, strips)
            current = ""
        current += part if position == len(parts) - 1 else part + sep
    if current:
        pieces += text_segmentate(current, maxlen, finer, strips)
    return pieces


def longest_common_substring(source, target):
    """The longest contiguous run shared by ``source`` and ``target``.

    Returns ``(length, (source_start, source_end, target_start, target_end))``,
    half-open spans; of several runs of the same length, the first found
    scanning ``source`` then ``target`` in order; ``(0, (0, 0, 0, 0))`` if none.
    """
    best, span = 0, (0, 0, 0, 0)
    previous = [0] * (len(target) + 1)  # run lengths ending at the previous source item
    for i, s_item in enumerate(source, 1):
        current = [0] * (len(target) + 1)
        for j, t_item in enumerate(target, 1):
            if s_item == t_item:
                current[j] = previous[j - 1] + 1
                if current[j] > best:
                    best = current[j]
                    span = (i - best, i, j - best, j)
        previous = current
    return best, span


def longest_common_subsequence(source, target):
    """The longest (not necessarily contiguous) subsequence shared by both.

    Returns ``(length, mapping)``: ``mapping`` lists the ``(source_index,
    target_index)`` pairs of one such subsequence in order (when several exist,
    the one bert4keras's back-tracking picks: matches are taken from the end,
    otherwise the target index moves first only when that keeps a strictly
    longer prefix).
    """
    rows, cols = len(source), len(target)
    table = np.zeros((rows + 1, cols + 1), dtype=np.int64)
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            if source[i - 1] == target[j - 1]:
                table[i, j] = table[i - 1, j - 1] + 1
            else:
                table[i, j] = max(table[i, j - 1], table[i - 1, j])
    length = int(table[rows, cols])
    mapping, i, j = [], rows - 1, cols - 1
    while len(mapping) < length:
        if source[i] == target[j]:
            mapping.append((i, j))
            i, j = i - 1, j - 1
        elif table[i + 1, j] > table[i, j + 1]:
            j -= 1
        else:
            i -= 1
    mapping.reverse()
    return length, mapping
