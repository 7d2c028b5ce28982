"""Whole-word masked-LM examples, GAU-α's recipe (docs/pretraining.md).

Per document: segment into words, tokenize each word, select each word with
p = 0.15; a selected word has all its tokens replaced by ``[MASK]`` (80%), by
random tokens (10%) or left unchanged (10%). Labels are the original ids at the
selected positions and 0 elsewhere. Examples are ``[CLS] … [SEP]`` of at most
``maxlen`` tokens; longer documents are cut at word boundaries into several
examples.

Two storage modes:
  * static: ``{'token_ids': masked ids, 'labels': ids or 0}``, masks fixed once;
  * dynamic: ``{'token_ids': original ids, 'word_starts': 1 at the first token
    of each word, 0 elsewhere ([CLS], [SEP] and word continuations)}``; the
    masks are drawn at training time by ``dynamic_whole_word_mask`` (tf ops).

The numpy part never imports TensorFlow (it runs in the LAC-safe corpus
workers); only ``dynamic_whole_word_mask`` imports it, when called.
"""

import dataclasses

import numpy as np

from gau_keras.tokenizers import is_special

#: an input file more than this share of whose lines (records) are unusable is refused rather than read for the rest:
#: prepare_corpus for a corpus, the CLUE readers for each task file
MAX_SKIPPED_SHARE = 0.5


def mostly_unusable(bad, total):
    """Whether ``bad`` of ``total`` lines is more than `MAX_SKIPPED_SHARE` of them (the input is then refused)."""
    return bad > MAX_SKIPPED_SHARE * total


def is_special_token(token):
    """``[CLS]``-style and ``<S>``-style tokens: never used as random replacements."""
    return is_special(token) or (len(token) > 2 and token[0] == "<" and token[-1] == ">")


def random_token_ids(token_dict):
    """Sorted ids of the vocab entries a random replacement may draw (no special tokens)."""
    return np.array(sorted(i for token, i in token_dict.items() if not is_special_token(token)), dtype=np.int64)


@dataclasses.dataclass
class MaskStats:
    """Counts over the documents seen (content tokens exclude [CLS]/[SEP])."""

    documents: int = 0
    examples: int = 0
    tokens: int = 0  # all tokens written, [CLS]/[SEP] included
    content_tokens: int = 0
    words: int = 0
    selected_words: int = 0
    selected_tokens: int = 0  # positions with a label
    mask_tokens: int = 0  # ... replaced by [MASK]
    random_tokens: int = 0  # ... replaced by a random token
    kept_tokens: int = 0  # ... left unchanged

    def add(self, other):
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self

    def as_dict(self):
        return dataclasses.asdict(self)


def chunk_words(word_ids, max_tokens):
    """Greedily pack consecutive words into chunks of at most ``max_tokens``
    tokens. A word longer than ``max_tokens`` is cut into pieces, each then
    treated as a word. ``word_ids``: list of non-empty id lists."""
    if max_tokens < 1:
        raise ValueError(f"chunk_words: max_tokens must be >= 1, got {max_tokens}")
    chunks, current, size = [], [], 0
    for word in word_ids:
        pieces = [word[i : i + max_tokens] for i in range(0, len(word), max_tokens)]
        for piece in pieces:
            if size + len(piece) > max_tokens:
                chunks.append(current)
                current, size = [], 0
            current.append(piece)
            size += len(piece)
    if current:
        chunks.append(current)
    return chunks


class WholeWordMLM:
    """Turns segmented documents into whole-word MLM examples.

    Args:
        tokenizer: a ``gau_keras.tokenizers.Tokenizer``.
        maxlen: maximum example length, ``[CLS]`` and ``[SEP]`` included.
        mask_prob: probability that a word is selected.
        mask_ratio / random_ratio: of the selected words, the share replaced by
            ``[MASK]`` / by random tokens (the rest stays unchanged).
        dynamic: store word starts instead of fixed masks.
    """

    def __init__(self, tokenizer, maxlen=512, mask_prob=0.15, mask_ratio=0.8, random_ratio=0.1, dynamic=False):
        if maxlen < 3:
            raise ValueError(f"WholeWordMLM: maxlen must be >= 3 ([CLS] x [SEP]), got {maxlen}")
        if not (0 <= mask_prob <= 1 and mask_ratio >= 0 and random_ratio >= 0 and mask_ratio + random_ratio <= 1):
            raise ValueError(
                "WholeWordMLM: need 0 <= mask_prob <= 1 and mask_ratio + random_ratio <= 1, got "
                f"mask_prob={mask_prob}, mask_ratio={mask_ratio}, random_ratio={random_ratio}"
            )
        self.tokenizer = tokenizer
        self.maxlen = maxlen
        self.mask_prob, self.mask_ratio, self.random_ratio = mask_prob, mask_ratio, random_ratio
        self.dynamic = dynamic
        self.cls_id, self.sep_id = tokenizer.token_start_id, tokenizer.token_end_id
        self.mask_id = tokenizer.token_mask_id
        self.random_ids = random_token_ids(tokenizer.token_dict)

    def word_token_ids(self, words):
        """Token ids of each word; words without tokens are dropped."""
        ids = (self.tokenizer.tokens_to_ids(self.tokenizer.tokenize_words(word)) for word in words)
        return [word_ids for word_ids in ids if word_ids]

    def examples(self, words, rng):
        """Examples of one segmented document.

        Args:
            words: the document's words (``list[str]``).
            rng: a ``numpy.random.Generator``; the only source of randomness.
        Returns:
            (list of feature dicts of int lists, ``MaskStats``).
        """
        stats = MaskStats(documents=1)
        examples = []
        for chunk in chunk_words(self.word_token_ids(words), self.maxlen - 2):
            if self.dynamic:
                features = self._word_starts(chunk)
            else:
                features = self._static_mask(chunk, rng, stats)
            examples.append(features)
            stats.tokens += len(features["token_ids"])
            stats.content_tokens += len(features["token_ids"]) - 2
            stats.words += len(chunk)
        stats.examples = len(examples)
        return examples, stats

    def _word_starts(self, chunk):
        starts = [flag for word in chunk for flag in [1] + [0] * (len(word) - 1)]
        token_ids = [self.cls_id] + [i for word in chunk for i in word] + [self.sep_id]
        return {"token_ids": token_ids, "word_starts": [0] + starts + [0]}

    def _static_mask(self, chunk, rng, stats):
        """Masks one chunk; rng draws are a fixed function of the chunk's sizes."""
        lengths = np.array([len(word) for word in chunk])
        original = np.concatenate(chunk).astype(np.int64)
        selected_word = rng.random(len(chunk)) < self.mask_prob
        action_word = rng.random(len(chunk))
        random_tokens = self.random_ids[rng.integers(0, len(self.random_ids), size=len(original))]
        selected = np.repeat(selected_word, lengths)
        action = np.repeat(action_word, lengths)
        to_mask = selected & (action < self.mask_ratio)
        to_random = selected & ~to_mask & (action < self.mask_ratio + self.random_ratio)
        token_ids = np.where(to_mask, self.mask_id, np.where(to_random, random_tokens, original))
        labels = np.where(selected, original, 0)
        stats.selected_words += int(selected_word.sum())
        stats.selected_tokens += int(selected.sum())
        stats.mask_tokens += int(to_mask.sum())
        stats.random_tokens += int(to_random.sum())
        stats.kept_tokens += int((selected & ~to_mask & ~to_random).sum())
        return {"token_ids": [self.cls_id] + token_ids.tolist() + [self.sep_id], "labels": [0] + labels.tolist() + [0]}


class SequencePacker:
    """Packs consecutive examples into sequences of at most ``maxlen`` tokens.

    An example is ``[CLS] a [SEP]``; packed, ``[CLS] a [SEP] b [SEP] c [SEP]``
    (as RoBERTa's full-sentence inputs): every feature of a joined example
    loses its first entry (the ``[CLS]`` slot) and is appended. Short
    documents (news titles, reviews) otherwise leave most of each padded
    sequence empty. Examples are never split; the order is kept.

        packer = SequencePacker(128)
        for features in examples:
            for packed in packer.add(features):
                write(packed)
        for packed in packer.flush():
            write(packed)
    """

    def __init__(self, maxlen):
        self.maxlen = maxlen
        self._current = None
        self.sequences = 0

    def add(self, features):
        """Adds one example (``{name: list}``); returns the sequences completed."""
        length = len(features["token_ids"])
        if length > self.maxlen:
            raise ValueError(f"SequencePacker: an example of {length} tokens exceeds maxlen={self.maxlen}")
        done = []
        if self._current is not None and len(self._current["token_ids"]) + length - 1 > self.maxlen:
            done = self.flush()
        if self._current is None:
            self._current = {name: list(values) for name, values in features.items()}
        else:
            if set(features) != set(self._current):
                raise ValueError(f"SequencePacker: features {sorted(features)} differ from {sorted(self._current)}")
            for name, values in features.items():
                self._current[name].extend(values[1:])
        return done

    def flush(self):
        """The sequence in progress (as a one-element list), or ``[]``."""
        if self._current is None:
            return []
        done, self._current = [self._current], None
        self.sequences += 1
        return done


def dynamic_whole_word_mask(
    token_ids,
    word_starts,
    seed,
    mask_token_id,
    random_token_ids,
    mask_prob=0.15,
    mask_ratio=0.8,
    random_ratio=0.1,
    char_fraction=0.0,
):
    """Whole-word MLM masking in TensorFlow ops (``tf.data``-mappable).

    Args:
        token_ids: int ``[L]`` or ``[B, L]``, ``[CLS] … [SEP]`` then 0-padding
            (packed: ``[CLS] a [SEP] b [SEP]``; no [SEP] is ever selected).
        word_starts: int ``[L]`` or ``[B, L]``, 1 at each word's first token,
            0 elsewhere ([CLS], [SEP], continuations, padding).
        seed: int ``[2]`` stateless seed; equal seeds give equal masks.
        mask_token_id: id of ``[MASK]``.
        random_token_ids: int ``[R]`` ids that random replacement draws from.
        char_fraction: the probability that a sequence is masked per token
            (every token of a word its own unit) instead of per word. Whole-word
            masks alone never show a [MASK] beside the rest of its word, which is
            what a fill-mask query of one character inside a word looks like.
    Returns:
        (masked token_ids, labels), both shaped and typed like ``token_ids``;
        labels are the original ids at the selected positions, 0 elsewhere.
    """
    import tensorflow as tf  # only here: the rest of this module must stay TF-free

    token_ids = tf.convert_to_tensor(token_ids)
    dtype = token_ids.dtype
    rank = token_ids.shape.rank
    word_index = tf.cumsum(tf.cast(word_starts, tf.int32), axis=-1)  # 0 = before the first word
    length = tf.reduce_sum(tf.cast(token_ids != 0, tf.int32), axis=-1, keepdims=True)
    position = tf.range(tf.shape(token_ids)[-1])
    # the last real token is [SEP]; packed sequences hold more of them, all outside words
    sep = tf.gather(token_ids, tf.maximum(length - 1, 0), batch_dims=rank - 1)
    in_word = (word_index > 0) & (position < length - 1) & (token_ids != sep)
    if char_fraction:
        # every in-word token a unit of its own, for the sequences drawn (seeded apart
        # from the three draws below, so char_fraction=0 keeps the whole-word masks)
        per_char = (
            tf.random.stateless_uniform(
                tf.concat([tf.shape(token_ids)[:-1], [1]], 0),
                tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64), 3),
            )
            < char_fraction
        )
        char_index = tf.cumsum(tf.cast(in_word, tf.int32), axis=-1)
        word_index = tf.where(per_char & in_word, char_index, word_index)

    per_word_shape = tf.concat([tf.shape(token_ids)[:-1], tf.shape(token_ids)[-1:] + 1], 0)
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3)
    select_u = tf.random.stateless_uniform(per_word_shape, seeds[0])
    action_u = tf.random.stateless_uniform(per_word_shape, seeds[1])
    select_u = tf.gather(select_u, word_index, batch_dims=rank - 1)
    action_u = tf.gather(action_u, word_index, batch_dims=rank - 1)
    random_ids = tf.cast(tf.convert_to_tensor(random_token_ids), dtype)
    random_pick = tf.random.stateless_uniform(
        tf.shape(token_ids), seeds[2], minval=0, maxval=tf.shape(random_ids)[0], dtype=tf.int32
    )
    random_tokens = tf.gather(random_ids, random_pick)

    selected = in_word & (select_u < mask_prob)
    to_mask = selected & (action_u < mask_ratio)
    to_random = selected & ~to_mask & (action_u < mask_ratio + random_ratio)
    masked = tf.where(to_mask, tf.cast(mask_token_id, dtype), tf.where(to_random, random_tokens, token_ids))
    labels = tf.where(selected, token_ids, tf.zeros_like(token_ids))
    return masked, labels
