"""bert4keras-compatible tokenizers (no TensorFlow): WordPiece (pure Python) and SentencePiece.

    tokenizer = Tokenizer("vocab.txt", do_lower_case=True)
    token_ids, segment_ids = tokenizer.encode("今天天气很好", "Hello!", maxlen=16)
    sp = SpTokenizer("spiece.model", token_start=None, token_end="</s>")  # T5 / mT5 style

Behaviour follows bert4keras's ``Tokenizer``: CJK characters are one token
each, punctuation is split off, lower-casing also strips accents (NFD, drop
combining marks), the remaining words go through greedy longest-match-first
WordPiece with ``##`` continuations, and a word that cannot be pieced together
stays one token that maps to ``[UNK]`` (so ``rematch`` can still locate it).
``SpTokenizer`` is bert4keras's SentencePiece tokenizer (needs the ``sentencepiece``
package); both share ``TokenizerBase``'s ``tokenize`` / ``encode`` (patterns, truncation).

Design notes: docs/architecture.md.
"""

import abc
import json
import operator
import os
import re
import unicodedata

import numpy as np

from gau_keras import optional

# Full-width and CJK punctuation after which ``decode`` drops the space.
_CJK_PUNCTUATION = (
    "\uff02\uff03\uff04\uff05\uff06\uff07\uff08\uff09\uff0a\uff0b\uff0c\uff0d"
    "\uff0f\uff1a\uff1b\uff1c\uff1d\uff1e\uff20\uff3b\uff3c\uff3d\uff3e\uff3f"
    "\uff40\uff5b\uff5c\uff5d\uff5e\uff5f\uff60\uff62\uff63\uff64\u3000\u3001"
    "\u3003\u3008\u3009\u300a\u300b\u300c\u300d\u300e\u300f\u3010\u3011\u3014"
    "\u3015\u3016\u3017\u3018\u3019\u301a\u301b\u301c\u301d\u301e\u301f\u3030"
    "\u303e\u303f\u2013\u2014\u2018\u2019\u201b\u201c\u201d\u201e\u201f\u2026"
    "\u2027\ufe4f\ufe51\ufe54\u00b7\uff01\uff1f\uff61\u3002"
)
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


class TokenIdError(KeyError, ValueError):
    """An id that is not in the vocab (message names the id and the vocab size)."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def is_cjk_character(ch):
    """True for a CJK unified / compatibility ideograph (one token each)."""
    code = ord(ch)
    return any(low <= code <= high for low, high in _CJK_RANGES)


def is_punctuation(ch):
    """ASCII symbols (``!``..``/``, ``:``..``@``, ``[``..`` ` ``, ``{``..``~``) and Unicode P*."""
    code = ord(ch)
    return (
        33 <= code <= 47
        or 58 <= code <= 64
        or 91 <= code <= 96
        or 123 <= code <= 126
        or unicodedata.category(ch).startswith("P")
    )


def is_space(ch):
    return ch in " \n\r\t" or unicodedata.category(ch) == "Zs"


def is_control(ch):
    return unicodedata.category(ch) in ("Cc", "Cf")


def is_dropped(ch):
    """Characters the tokenizer deletes: NUL, U+FFFD and control/format chars."""
    return ord(ch) == 0 or ord(ch) == 0xFFFD or is_control(ch)


def is_special(token):
    """bert4keras's test for special tokens: ``[...]`` (e.g. ``[CLS]``, ``[unused1]``)."""
    return bool(token) and token[0] == "[" and token[-1] == "]"


def stem(token):
    """The text a token covers: ``##ing`` -> ``ing``."""
    return token[2:] if token[:2] == "##" else token


def strip_accents(text):
    """Drops combining marks (NFD, remove category Mn, NFC again).

    bert4keras and Google's BERT stop after removing the marks, which leaves
    every Hangul syllable decomposed into its conjoining jamo (they are not
    marks); recomposing keeps "한" one character, found in the vocab as it is,
    while "é" still becomes "e".
    """
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn"))


def lowercase_and_normalize(text):
    """bert4keras's normalisation (also ``gau_keras.snippets.lowercase_and_normalize``):
    lower case, NFD-decomposed, the combining marks (category Mn) dropped. A Hangul
    syllable stays decomposed into its conjoining jamo; the Tokenizer uses
    ``lowercase_and_strip_accents``, which recomposes them."""
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn")


def lowercase_and_strip_accents(text):
    """The Tokenizer's normalisation: lower case (whole text: a final Σ becomes ς) and
    ``strip_accents`` (recomposed: "한" stays one character, "é" becomes "e")."""
    return strip_accents(text.lower())


def lowercase_per_character(text):
    """``text.lower()`` cut into the lowering of each character of ``text``.

    Python lowers character by character except for the final-sigma rule,
    which keeps lengths, so the pieces line up with the original characters.
    """
    lowered, pieces, position = text.lower(), [], 0
    for ch in text:
        size = len(ch.lower())
        pieces.append(lowered[position : position + size])
        position += size
    return pieces


def _text_argument(value, name, tokens=True, owner="Tokenizer"):
    """A text argument of ``encode`` / ``tokenize``: str (bytes decoded as UTF-8) or, where
    ``tokens``, a list (or tuple) of tokens; ``owner`` names the class in the errors."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{owner}: {name} is bytes that are not UTF-8 ({e.reason} at byte {e.start}); decode it first"
            ) from None
    if isinstance(value, str):
        return value
    if tokens and isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value):
        return value
    expected = "a str (or a list of token strings)" if tokens else "a str"
    raise TypeError(f"{owner}: {name} must be {expected}, got {type(value).__name__} {value!r:.60}")


def _token_boundary(text, start, window=1024):
    """The first index >= start (within ``window``) before which the tokenizer always ends a
    token and lower-casing cannot depend on what follows: a space or a CJK character (not
    punctuation: "." is case-ignorable, so a final Σ lowers to σ or ς by what comes after
    it); None if there is none."""
    for i in range(start, min(len(text), start + window)):
        if is_space(text[i]) or is_cjk_character(text[i]):
            return i
    return None


def truncate_sequences(maxlen, indices, *sequences):
    """Shortens the lists ``sequences`` in place until their total length is <= maxlen.

    Each round removes one item, at position ``indices`` (one for all or one per
    sequence, e.g. -1 for the end, -2 to keep a final [SEP]), from the longest
    sequence (the first of the longest on a tie). ``None`` and empty sequences are
    dropped from the result. Returns the list of the (same, shortened) lists.
    """
    sequences = [s for s in sequences if s]
    if not isinstance(indices, (list, tuple)):
        indices = [indices] * len(sequences)
    lengths = [len(s) for s in sequences]
    while sum(lengths) > maxlen:
        longest = int(np.argmax(lengths))
        sequences[longest].pop(indices[longest])
        lengths[longest] -= 1
    return sequences


def _is_redundant(token):
    """A multi-character token containing CJK or punctuation can never be
    produced (those characters are always split), so it is dropped by
    ``load_vocab(simplified=True)``."""
    if len(token) <= 1:
        return False
    return any(is_cjk_character(ch) or is_punctuation(ch) for ch in stem(token))


def _wordpiece_vocab(path):
    """The ``{token: id}`` of a Hugging Face ``tokenizer.json`` whose model is WordPiece (a fast
    BERT tokenizer's file); a ValueError naming the file for another model or broken ids."""
    try:
        with open(path, encoding="utf-8") as f:
            model = json.load(f).get("model") or {}
    except (ValueError, AttributeError) as e:
        raise ValueError(f"vocab {path}: not a Hugging Face tokenizer.json ({e})") from None
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise ValueError(
            f"vocab {path}: a {model.get('type')!r} tokenizer; only a WordPiece tokenizer.json (BERT's) "
            f"gives a vocab.txt's tokens"
        )
    token_dict = dict(sorted(model["vocab"].items(), key=lambda item: item[1]))
    if sorted(token_dict.values()) != list(range(len(token_dict))):
        raise ValueError(f"vocab {path}: the token ids are not 0 .. {len(token_dict) - 1}, each once")
    return token_dict


def _text_vocab(dict_path, encoding):
    """``{token: id}`` of a vocab.txt: one token a line (its first whitespace-separated field)."""
    token_dict = {}
    try:
        with open(dict_path, encoding=encoding) as reader:
            for line_number, line in enumerate(reader, 1):
                fields = line.split()
                token = fields[0] if fields else line.strip("\r\n")
                if token in token_dict:
                    raise ValueError(f"{dict_path}:{line_number}: duplicate token {token!r} in the vocab")
                token_dict[token] = len(token_dict)
    except UnicodeDecodeError as e:
        raise ValueError(
            f"vocab {dict_path}: not {encoding} text (byte {e.start} of the file: {e.reason}); "
            f"pass the file's encoding, e.g. load_vocab(path, encoding='gbk') or "
            f"Tokenizer(path, encoding='gbk')"
        ) from None
    except LookupError as e:
        raise ValueError(f"vocab {dict_path}: unknown encoding {encoding!r} ({e})") from None
    return token_dict


def load_vocab(dict_path, encoding="utf-8", simplified=False, startswith=None):
    """Read a vocab file (one token per line, first whitespace-separated field), or the vocabulary
    of a Hugging Face WordPiece ``tokenizer.json`` (a path ending in .json).

    Returns ``{token: id}``; with ``simplified=True`` returns
    ``(token_dict, keep_tokens)``: the ``startswith`` tokens first, then every
    non-redundant token in file order, renumbered, and ``keep_tokens`` the
    original ids of the kept tokens (for ``build_transformer_model(keep_tokens=...)``).
    """
    json_file = os.fspath(dict_path).endswith(".json")
    token_dict = _wordpiece_vocab(dict_path) if json_file else _text_vocab(dict_path, encoding)
    if not token_dict:
        raise ValueError(f"vocab {dict_path} is empty: one token per line expected")
    if not simplified:
        return token_dict
    new_dict, keep_tokens = {}, []
    for token in startswith or []:
        if token in token_dict and token not in new_dict:
            new_dict[token] = len(new_dict)
            keep_tokens.append(token_dict[token])
    for token, index in sorted(token_dict.items(), key=lambda item: item[1]):
        if token not in new_dict and not _is_redundant(token):
            new_dict[token] = len(new_dict)
            keep_tokens.append(index)
    return new_dict, keep_tokens


class TokenizerBase(abc.ABC):
    """What bert4keras's two tokenizers share (bert4keras's ``TokenizerBase``): the special
    tokens, ``tokenize`` (``token_start`` + tokens + ``token_end``, ``token_translate``
    applied), ``encode`` (pair patterns and truncation) and the id/token list conversions.

    A subclass sets ``_vocab_size`` and the ``_token_<name>_id`` it has, and implements
    ``_tokenize``, ``token_to_id``, ``id_to_token`` and ``decode``.

    Args:
        token_start / token_end: tokens ``tokenize`` adds around a text (``None`` to omit).
        pre_tokenize: optional ``text -> list of words`` (how a subclass uses it: its docs).
        token_translate: optional ``{token: replacement}`` applied by ``tokenize`` (and
            undone by ``SpTokenizer.decode``).
    """

    #: the class named in error messages
    _error_name = "Tokenizer"

    def __init__(self, token_start="[CLS]", token_end="[SEP]", pre_tokenize=None, token_translate=None):
        self._token_pad, self._token_unk, self._token_mask = "[PAD]", "[UNK]", "[MASK]"
        self._token_start, self._token_end = token_start, token_end
        self._pre_tokenize = pre_tokenize
        self._token_translate = dict(token_translate or {})
        self._token_translate_inv = {v: k for k, v in self._token_translate.items()}

    # -- special ids ------------------------------------------------------
    def _special_id(self, name):
        value = getattr(self, f"_token_{name}_id", None)
        if value is None:
            raise AttributeError(f"{self._error_name}: the vocab has no {name} token")
        return value

    token_pad_id = property(lambda self: self._special_id("pad"))
    token_unk_id = property(lambda self: self._special_id("unk"))
    token_mask_id = property(lambda self: self._special_id("mask"))
    token_start_id = property(lambda self: self._special_id("start"))
    token_end_id = property(lambda self: self._special_id("end"))
    token_cls_id = token_start_id
    token_sep_id = token_end_id

    # the special tokens themselves (bert4keras keeps them private; other modules need them)
    token_start = property(lambda self: self._token_start, doc="``[CLS]`` (None when omitted)")
    token_end = property(lambda self: self._token_end, doc="``[SEP]`` (None when omitted)")
    token_mask = property(lambda self: self._token_mask, doc="``[MASK]``")
    token_unk = property(lambda self: self._token_unk, doc="``[UNK]``")

    def tokenize_words(self, text):
        """The tokens of ``text`` without ``[CLS]``/``[SEP]`` (pre-tokenisation and
        ``token_translate`` not applied): what ``tokenize`` puts between them."""
        return self._tokenize(text)

    @property
    def vocab_size(self):
        return self._vocab_size

    # -- tokens <-> ids ----------------------------------------------------
    @abc.abstractmethod
    def token_to_id(self, token):
        """Id of ``token``."""

    def tokens_to_ids(self, tokens):
        return [self.token_to_id(token) for token in tokens]

    @abc.abstractmethod
    def id_to_token(self, i):
        """The token of id ``i``."""

    def ids_to_tokens(self, ids):
        return [self.id_to_token(i) for i in ids]

    @abc.abstractmethod
    def decode(self, ids):
        """Text of ``ids``."""

    @abc.abstractmethod
    def _tokenize(self, text):
        """Tokens of ``text`` without ``[CLS]``/``[SEP]``."""

    # -- tokenize / encode -------------------------------------------------
    def tokenize(self, text, maxlen=None):
        """Tokens of ``text`` wrapped in ``[CLS] … [SEP]``; with ``maxlen``,
        tokens are dropped from the end (before ``[SEP]``) to fit. Bytes are read as UTF-8."""
        text = _text_argument(text, "text", tokens=False, owner=self._error_name)
        tokens = [self._token_translate.get(token) or token for token in self._tokenize(text)]
        if self._token_start is not None:
            tokens.insert(0, self._token_start)
        if self._token_end is not None:
            tokens.append(self._token_end)
        if maxlen is not None:
            self._check_maxlen(maxlen, self._special_count())
            truncate_sequences(maxlen, -(int(self._token_end is not None) + 1), tokens)
        return tokens

    def _tokens_within(self, text, maxlen, truncate_from):
        """The tokens of ``text`` for ``encode`` under ``maxlen`` (a subclass may avoid
        tokenizing a long document whole): ``tokenize(text)`` here."""
        return self.tokenize(text)

    def _special_count(self):
        """How many of [CLS] / [SEP] ``tokenize`` adds to a text."""
        return int(self._token_start is not None) + int(self._token_end is not None)

    @staticmethod
    def _check_maxlen(maxlen, least):
        # bert4keras pops the special tokens themselves below this (maxlen=1 -> [SEP] alone)
        # and fails with "pop index out of range" below 0
        if isinstance(maxlen, bool) or not isinstance(maxlen, (int, np.integer)) or maxlen < least:
            raise ValueError(
                f"maxlen={maxlen!r} leaves no room for the special tokens: it must be an integer >= {least} here"
            )

    def encode(self, first_text, second_text=None, maxlen=None, pattern="S*E*E", truncate_from="right"):
        """Token ids and segment ids of one text or a pair.

        Texts may also be given as token lists. With ``maxlen``, tokens are
        popped from the longer text (before its ``[SEP]`` for
        ``truncate_from='right'``, after ``[CLS]`` for ``'left'``, or at the
        given index). ``pattern='S*E*E'`` gives ``[CLS] a [SEP] b [SEP]``,
        ``'S*ES*E'`` keeps the second ``[CLS]``. A ``maxlen`` below the number
        of special tokens (2 for a text, 3 for a pair) is a ValueError:
        bert4keras would pop ``[CLS]`` itself, then fail.
        """
        first_text = _text_argument(first_text, "first_text", owner=self._error_name)
        second_text = (
            None if second_text is None else _text_argument(second_text, "second_text", owner=self._error_name)
        )
        first_tokens = (
            self._tokens_within(first_text, maxlen, truncate_from) if isinstance(first_text, str) else list(first_text)
        )
        if second_text is None:
            second_tokens = None
        elif isinstance(second_text, str):
            second_tokens = self._tokens_within(second_text, maxlen, truncate_from)
        else:
            second_tokens = list(second_text)
        if maxlen is not None:
            least = sum(self._special_count() for text in (first_text, second_text) if isinstance(text, str))
            if isinstance(second_text, str) and pattern == "S*E*E" and self._token_start is not None:
                least -= 1  # the second [CLS] is dropped
            self._check_maxlen(maxlen, least)
            if truncate_from == "right":
                index = -int(self._token_end is not None) - 1
            elif truncate_from == "left":
                index = int(self._token_start is not None)
            else:
                index = truncate_from
            if second_tokens is not None and pattern == "S*E*E":
                maxlen += 1  # the second [CLS] is removed below
            truncate_sequences(maxlen, index, first_tokens, second_tokens)
        token_ids = self.tokens_to_ids(first_tokens)
        segment_ids = [0] * len(token_ids)
        if second_tokens is not None:
            if pattern == "S*E*E":
                second_tokens = second_tokens[int(bool(self._token_start)) :]
            second_ids = self.tokens_to_ids(second_tokens)
            token_ids.extend(second_ids)
            segment_ids.extend([1] * len(second_ids))
        return token_ids, segment_ids


class Tokenizer(TokenizerBase):
    """bert4keras-compatible WordPiece tokenizer.

    Args:
        token_dict: path of a vocab file or a ``{token: id}`` dict.
        do_lower_case: lower-case and strip accents before tokenizing (default False,
            as bert4keras; GAU-α's and the bundled vocab are uncased: pass True).
        word_maxlen: words longer than this are not pieced (one ``[UNK]``).
        token_start / token_end: tokens added by ``tokenize`` (``None`` to omit).
        pre_tokenize: optional ``text -> list of words``; words found in the
            vocab are kept whole, the rest are tokenized as usual.
        token_translate: optional ``{token: replacement}`` applied by ``tokenize``.
        encoding: of the vocab file (a file that is not in it is an error
            naming the file).
    """

    def __init__(
        self,
        token_dict,
        do_lower_case=False,
        word_maxlen=200,
        token_start="[CLS]",
        token_end="[SEP]",
        pre_tokenize=None,
        token_translate=None,
        encoding="utf-8",
    ):
        if isinstance(token_dict, (str, bytes)) or hasattr(token_dict, "__fspath__"):
            token_dict = load_vocab(token_dict, encoding=encoding)
        if not isinstance(token_dict, dict) or not token_dict:
            raise ValueError("Tokenizer: token_dict must be a vocab path or a non-empty {token: id} dict")
        super().__init__(
            token_start=token_start, token_end=token_end, pre_tokenize=pre_tokenize, token_translate=token_translate
        )
        self._token_dict = token_dict
        self._token_dict_inv = {index: token for token, index in token_dict.items()}
        self._vocab_size = len(token_dict)
        self._do_lower_case = do_lower_case
        self._word_maxlen = word_maxlen
        for name in ("pad", "unk", "mask", "start", "end"):
            token = getattr(self, f"_token_{name}")
            if token in token_dict:
                setattr(self, f"_token_{name}_id", token_dict[token])
        # bert4keras calls them start/end; [CLS]/[SEP] names for readability.
        if hasattr(self, "_token_start_id"):
            self._token_cls_id = self._token_start_id
        if hasattr(self, "_token_end_id"):
            self._token_sep_id = self._token_end_id

    # bert4keras exposes its character tests on the class; scripts use them
    stem = staticmethod(stem)
    _is_space = staticmethod(is_space)
    _is_punctuation = staticmethod(is_punctuation)
    _is_cjk_character = staticmethod(is_cjk_character)
    _is_control = staticmethod(is_control)
    _is_special = staticmethod(is_special)
    _is_redundant = staticmethod(_is_redundant)
    _cjk_punctuation = staticmethod(lambda: _CJK_PUNCTUATION)

    def has_token(self, token):
        """Whether ``token`` is in the vocab (``token_to_id`` maps unknown tokens to [UNK])."""
        return token in self._token_dict

    @property
    def vocab_size(self):
        return len(self._token_dict)

    @property
    def token_dict(self):
        return self._token_dict

    # -- tokens <-> ids ----------------------------------------------------
    def token_to_id(self, token):
        """Id of ``token``; unknown tokens map to ``[UNK]``."""
        return self._token_dict.get(token, getattr(self, "_token_unk_id", None))

    def id_to_token(self, i):
        """The token of id ``i``; an id outside the vocab is a ``TokenIdError``
        (a ``KeyError`` and a ``ValueError``) naming it and the vocab size."""
        try:
            return self._token_dict_inv[i]
        except (KeyError, TypeError):
            raise TokenIdError(
                f"Tokenizer: id {i!r} is not in the vocab ({self._vocab_size} tokens, ids 0..{self._vocab_size - 1})"
            ) from None

    # -- tokenize ----------------------------------------------------------
    def _tokens_within(self, text, maxlen, truncate_from):
        """``tokenize(text)``, or for a text far longer than ``maxlen`` under right truncation,
        the tokens of a prefix cut where a token boundary is certain (before a space or a CJK
        character) that already holds more than ``maxlen`` tokens: right
        truncation keeps the first tokens, so the result is the same, without tokenizing a
        long document whole. Not with a pre-tokenizer (jieba's words depend on what follows)."""
        if not isinstance(maxlen, int) or maxlen < 1 or truncate_from != "right" or self._pre_tokenize is not None:
            return self.tokenize(text)
        size = 4 * maxlen + 64
        while size < len(text):
            cut = _token_boundary(text, size)
            if cut is None:
                break
            tokens = self.tokenize(text[:cut])
            if len(tokens) > maxlen + 4:  # + [CLS], [SEP] and encode's own allowances
                return tokens
            size *= 4
        return self.tokenize(text)

    def _tokenize(self, text, pre_tokenize=True):
        """Tokens of ``text`` without ``[CLS]``/``[SEP]``."""
        if self._do_lower_case:
            text = lowercase_and_strip_accents(text)
        if pre_tokenize and self._pre_tokenize is not None:
            tokens = []
            for word in self._pre_tokenize(text):
                if word in self._token_dict:
                    tokens.append(word)
                else:
                    tokens.extend(self._tokenize(word, pre_tokenize=False))
            return tokens
        pieces = []
        for ch in text:
            if is_punctuation(ch) or is_cjk_character(ch):
                pieces.append(f" {ch} ")
            elif is_space(ch):
                pieces.append(" ")
            elif not is_dropped(ch):
                pieces.append(ch)
        tokens = []
        for word in "".join(pieces).split():
            tokens.extend(self._word_piece_tokenize(word))
        return tokens

    def _word_piece_tokenize(self, word):
        """Greedy longest-match-first split of one word into vocab pieces."""
        if len(word) > self._word_maxlen:
            return [word]
        tokens, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self._token_dict:
                    break
            else:
                return [word]  # unknown word: one token, id [UNK]
            tokens.append(piece)
            start = end
        return tokens

    # -- decode / rematch ----------------------------------------------------
    def decode(self, ids, tokens=None):
        """Readable text from ids (special tokens dropped, CJK unspaced)."""
        tokens = tokens or self.ids_to_tokens(ids)
        tokens = [token for token in tokens if not is_special(token)]
        text = ""
        for i, token in enumerate(tokens):
            if token[:2] == "##":
                text += token[2:]
            elif len(token) == 1 and is_cjk_character(token):
                text += token
            elif len(token) == 1 and is_punctuation(token):
                text += token + " "
            elif i > 0 and text and is_cjk_character(text[-1]):
                text += token
            else:
                text += " " + token
        text = re.sub(" +", " ", text)
        text = re.sub(r"' (re|m|s|t|ve|d|ll) ", r"'\1 ", text)
        no_space_after = "|".join(re.escape(p) for p in _CJK_PUNCTUATION + "+-/={(<[")
        text = re.sub(f"({no_space_after}) ", r"\1", text)
        text = re.sub(r"(\d\.) (\d)", r"\1\2", text)
        return text.strip()

    def rematch(self, text, tokens):
        """For each token, the list of indices of the characters of ``text``
        it covers (``[]`` for special tokens such as ``[CLS]``)."""
        normalized, char_mapping = [], []
        # lowered as tokenize lowers (the whole text: final sigma), aligned per character
        characters = lowercase_per_character(text) if self._do_lower_case else text
        for i, ch in enumerate(characters):
            if self._do_lower_case:
                ch = strip_accents(ch)
            ch = "".join(c for c in ch if not is_dropped(c))
            normalized.append(ch)
            char_mapping.extend([i] * len(ch))
        normalized = "".join(normalized)
        token_mapping, offset = [], 0
        for token in tokens:
            if is_special(token):
                token_mapping.append([])
                continue
            piece = stem(token)
            start = normalized.find(piece, offset)
            if start < 0:
                raise ValueError(
                    f"Tokenizer.rematch: token {token!r} not found in the text after "
                    f"character {offset}; were the tokens produced from this text?"
                )
            end = start + len(piece)
            # one original character may normalise to several (e.g. "ﬁ" -> "fi"): each index once
            token_mapping.append(sorted(set(char_mapping[start:end])))
            offset = end
        return token_mapping


class SpTokenizer(TokenizerBase):
    """bert4keras's ``SpTokenizer``: a SentencePiece model behind the ``Tokenizer`` interface
    (``tokenize``, ``encode``, ``decode``, ...), as T5 / mT5 / T5-PEGASUS checkpoints use it::

        tokenizer = SpTokenizer("spiece.model", token_start=None, token_end="</s>")

    As in bert4keras: ``_token_pad`` and ``_token_unk`` are the model's pad and unk pieces
    (``_token_pad`` None when the model has no pad id); every special token's id is
    ``sp_model.piece_to_id(token)``, so a token the model lacks (the default
    ``token_start='[CLS]'``, ``[MASK]``) has the unk id; ``token_to_id`` of an unknown piece
    is the unk id; ``id_to_token`` of an id past the vocab is ``''``; ``pre_tokenize``'s
    words are joined with spaces before SentencePiece; ``decode`` undoes
    ``token_translate`` and lets SentencePiece drop control pieces (``</s>``, ``<pad>``).
    Needs the ``sentencepiece`` package (imported here, not at ``import gau_keras``).

    Args:
        sp_model_path: the ``.model`` file (a missing or unreadable file is an error naming it).
        **kwargs: ``token_start``, ``token_end``, ``pre_tokenize``, ``token_translate``
            (``TokenizerBase``).
    """

    _error_name = "SpTokenizer"

    def __init__(self, sp_model_path, **kwargs):
        super().__init__(**kwargs)
        spm = optional.sentencepiece("SpTokenizer")
        path = os.fspath(sp_model_path)
        if not os.path.isfile(path):
            what = "is a directory" if os.path.isdir(path) else "does not exist"
            raise FileNotFoundError(f"SpTokenizer: SentencePiece model file {path!r} {what}")
        self.sp_model = spm.SentencePieceProcessor()
        try:
            self.sp_model.Load(path)
        except (RuntimeError, OSError) as error:
            reason = " ".join(str(error).split())
            raise ValueError(f"SpTokenizer: cannot read SentencePiece model file {path!r} ({reason})") from None
        self._vocab_size = self.sp_model.get_piece_size()
        self._token_pad = self._piece_or_none(self.sp_model.pad_id())
        self._token_unk = self._piece_or_none(self.sp_model.unk_id())
        for name in ("pad", "unk", "mask", "start", "end"):
            token = getattr(self, f"_token_{name}")
            if isinstance(token, str):
                setattr(self, f"_token_{name}_id", self.sp_model.piece_to_id(token))

    def _piece_or_none(self, i):
        """The piece of id ``i``; None for a disabled id (-1)."""
        return self.sp_model.id_to_piece(i) if 0 <= i < self._vocab_size else None

    def has_token(self, token):
        """Whether ``token`` is a piece of the model (``token_to_id`` maps others to the unk id)."""
        return isinstance(token, str) and (
            self.sp_model.piece_to_id(token) != self.sp_model.unk_id() or token == self._token_unk
        )

    # -- tokens <-> ids ----------------------------------------------------
    def token_to_id(self, token):
        """Id of the piece ``token``; unknown pieces map to the unk id."""
        return self.sp_model.piece_to_id(token)

    def id_to_token(self, i):
        """The piece of id ``i``; ``''`` for an id past the vocab (as bert4keras); a negative id
        is a ``TokenIdError`` naming it and the vocab size."""
        try:
            index = operator.index(i)
        except TypeError:
            index = -1
        if index < 0:
            raise TokenIdError(
                f"SpTokenizer: id {i!r} is not in the vocab ({self._vocab_size} pieces, ids 0..{self._vocab_size - 1})"
            )
        return self.sp_model.id_to_piece(index) if index < self._vocab_size else ""

    # -- tokenize / decode ---------------------------------------------------
    def _tokenize(self, text):
        """SentencePiece's pieces of ``text`` (after ``pre_tokenize``, its words joined by spaces)."""
        if self._pre_tokenize is not None:
            text = " ".join(self._pre_tokenize(text))
        return self.sp_model.encode_as_pieces(text)

    def decode(self, ids):
        """Text of ``ids`` (``token_translate`` undone; SentencePiece drops control pieces)."""
        tokens = [self._token_translate_inv.get(token) or token for token in self.ids_to_tokens(ids)]
        text = self.sp_model.decode_pieces(tokens)
        return text.decode("utf-8") if isinstance(text, bytes) else text

    def _is_special(self, i):
        """Whether id ``i`` is a control, unknown or unused piece."""
        return self.sp_model.is_control(i) or self.sp_model.is_unknown(i) or self.sp_model.is_unused(i)

    def _is_decodable(self, i):
        """Whether id ``i`` should appear in decoded output (in the vocab, not special)."""
        return (i < self._vocab_size) and not self._is_special(i)
