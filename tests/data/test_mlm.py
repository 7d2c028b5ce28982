"""Whole-word MLM: masking statistics on real text, label alignment, whole words,
chunking, determinism, and the dynamic (tf) masking."""

import numpy as np
import pytest

from gau_keras.data.mlm import WholeWordMLM, chunk_words, dynamic_whole_word_mask, random_token_ids
from gau_keras.segmenters import get_segmenter
from gau_keras.tokenizers import Tokenizer

N_DOCS = 600


@pytest.fixture(scope="module")
def corpus_words(request):
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent")
    with open(SHARED_DATA / "corpus" / "zh_corpus.txt", encoding="utf-8") as f:
        texts = [line.strip() for _, line in zip(range(N_DOCS), f) if line.strip()]
    tokenizer = Tokenizer(str(SHARED_DATA / "vocab" / "gau_alpha_vocab.txt"), do_lower_case=True)
    return tokenizer, get_segmenter("jieba").segment(texts)


def _make(tokenizer, words_list, seed, **kwargs):
    mlm = WholeWordMLM(tokenizer, **kwargs)
    examples, stats = [], None
    for doc_index, words in enumerate(words_list):
        doc_examples, doc_stats = mlm.examples(words, np.random.default_rng([seed, doc_index]))
        examples.extend(doc_examples)
        stats = doc_stats if stats is None else stats.add(doc_stats)
    return examples, stats


def _word_spans(word_starts):
    """(start, end) of each word from the flags (CLS/SEP excluded)."""
    starts = [i for i, flag in enumerate(word_starts) if flag]
    ends = starts[1:] + [len(word_starts) - 1]
    return list(zip(starts, ends))


def test_static_statistics_on_real_text(corpus_words):
    tokenizer, words_list = corpus_words
    static, stats = _make(tokenizer, words_list, seed=7, maxlen=64)
    dynamic, _ = _make(tokenizer, words_list, seed=7, maxlen=64, dynamic=True)
    assert len(static) == len(dynamic) == stats.examples
    mask_id = tokenizer.token_mask_id
    special = {tokenizer.token_cls_id, tokenizer.token_sep_id, tokenizer.token_pad_id, mask_id}
    n_words = n_selected = 0
    kinds = {"mask": 0, "random": 0, "unchanged": 0}
    for masked, plain in zip(static, dynamic):
        ids, labels = np.array(masked["token_ids"]), np.array(masked["labels"])
        original = np.array(plain["token_ids"])
        assert len(ids) == len(labels) == len(original) <= 64
        assert ids[0] == tokenizer.token_cls_id and ids[-1] == tokenizer.token_sep_id
        assert labels[0] == labels[-1] == 0
        # labels are the original ids exactly where a label is set
        selected = labels != 0
        np.testing.assert_array_equal(labels[selected], original[selected])
        np.testing.assert_array_equal(ids[~selected], original[~selected])
        for start, end in _word_spans(plain["word_starts"]):
            n_words += 1
            word_selected = selected[start:end]
            assert word_selected.all() or not word_selected.any(), "a word was masked partially"
            if not word_selected.any():
                continue
            n_selected += 1
            word_ids = ids[start:end]
            if (word_ids == mask_id).all():
                kinds["mask"] += 1
            elif (word_ids == original[start:end]).all():
                kinds["unchanged"] += 1
            else:
                assert not (word_ids == mask_id).any(), "a word mixes [MASK] and other tokens"
                assert not set(word_ids.tolist()) & special
                kinds["random"] += 1
    assert n_words == stats.words > 5000
    assert n_selected == stats.selected_words
    assert abs(n_selected / n_words - 0.15) < 0.015
    assert abs(kinds["mask"] / n_selected - 0.8) < 0.04
    assert abs(kinds["random"] / n_selected - 0.1) < 0.03
    assert abs(kinds["unchanged"] / n_selected - 0.1) < 0.03
    assert stats.selected_tokens == stats.mask_tokens + stats.random_tokens + stats.kept_tokens
    assert stats.tokens == stats.content_tokens + 2 * stats.examples


def test_deterministic_given_seed(corpus_words):
    tokenizer, words_list = corpus_words
    first, _ = _make(tokenizer, words_list[:50], seed=3)
    again, _ = _make(tokenizer, words_list[:50], seed=3)
    other, _ = _make(tokenizer, words_list[:50], seed=4)
    assert first == again
    assert first != other


def test_long_document_is_split_at_word_boundaries():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<S>", "a", "b", "c", "d", "##x"]
    tokenizer = Tokenizer({t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    words = ["a", "bx", "c", "dxxxxxx", "a", "b"]  # 1, 2, 1, 7, 1, 1 tokens
    examples, stats = WholeWordMLM(tokenizer, maxlen=6, dynamic=True).examples(words, np.random.default_rng(0))
    tokens = [tokenizer.ids_to_tokens(e["token_ids"]) for e in examples]
    assert tokens == [
        ["[CLS]", "a", "b", "##x", "c", "[SEP]"],
        ["[CLS]", "d", "##x", "##x", "##x", "[SEP]"],  # a 7-token word is cut into 4 + 3
        ["[CLS]", "##x", "##x", "##x", "a", "[SEP]"],
        ["[CLS]", "b", "[SEP]"],
    ]
    assert [e["word_starts"] for e in examples] == [
        [0, 1, 1, 0, 1, 0],
        [0, 1, 0, 0, 0, 0],
        [0, 1, 0, 0, 1, 0],
        [0, 1, 0],
    ]
    assert stats.examples == 4 and stats.words == 7 and stats.content_tokens == 13


def test_chunk_words_rejects_bad_size():
    with pytest.raises(ValueError, match="max_tokens"):
        chunk_words([[1]], 0)


def test_random_token_ids_exclude_specials():
    token_dict = {t: i for i, t in enumerate(["[PAD]", "[unused1]", "<S>", "<", "a", "##b", "[MASK]"])}
    assert random_token_ids(token_dict).tolist() == [3, 4, 5]


def test_dynamic_mask_tf(corpus_words):
    import tensorflow as tf

    tokenizer, words_list = corpus_words
    examples, _ = _make(tokenizer, words_list, seed=1, maxlen=64, dynamic=True)
    maxlen = 64
    token_ids = np.zeros([len(examples), maxlen], np.int64)
    word_starts = np.zeros_like(token_ids)
    for row, e in enumerate(examples):
        token_ids[row, : len(e["token_ids"])] = e["token_ids"]
        word_starts[row, : len(e["word_starts"])] = e["word_starts"]
    random_ids = random_token_ids(tokenizer.token_dict)
    masked, labels = dynamic_whole_word_mask(
        tf.constant(token_ids), tf.constant(word_starts), tf.constant([5, 6]), tokenizer.token_mask_id, random_ids
    )
    masked, labels = masked.numpy(), labels.numpy()
    again, _ = dynamic_whole_word_mask(token_ids, word_starts, [5, 6], tokenizer.token_mask_id, random_ids)
    other, _ = dynamic_whole_word_mask(token_ids, word_starts, [5, 7], tokenizer.token_mask_id, random_ids)
    np.testing.assert_array_equal(masked, again.numpy())
    assert (masked != other.numpy()).any()
    # one example alone (rank 1) is masked the same way as any row: same function, shape kept
    single, single_labels = dynamic_whole_word_mask(
        token_ids[0], word_starts[0], [5, 6], tokenizer.token_mask_id, random_ids
    )
    assert single.shape == (maxlen,) and single_labels.shape == (maxlen,)

    selected = labels != 0
    np.testing.assert_array_equal(labels[selected], token_ids[selected])
    np.testing.assert_array_equal(masked[~selected], token_ids[~selected])
    assert not selected[token_ids == 0].any()
    assert not selected[token_ids == tokenizer.token_cls_id].any()
    assert not selected[token_ids == tokenizer.token_sep_id].any()
    n_words = n_selected = n_mask = 0
    for row, e in enumerate(examples):
        for start, end in _word_spans(e["word_starts"]):
            n_words += 1
            word = selected[row, start:end]
            assert word.all() or not word.any()
            if word.any():
                n_selected += 1
                n_mask += int((masked[row, start:end] == tokenizer.token_mask_id).all())
    assert abs(n_selected / n_words - 0.15) < 0.015
    assert abs(n_mask / n_selected - 0.8) < 0.04
    assert set(masked[selected & (masked != token_ids) & (masked != tokenizer.token_mask_id)]) <= set(random_ids)


def test_dynamic_mask_char_fraction(corpus_words):
    """char_fraction=1 masks tokens one by one (at mask_prob of the in-word tokens, words
    split); 0 is the whole-word masking itself, draw for draw."""
    tokenizer, words_list = corpus_words
    examples, _ = _make(tokenizer, words_list, seed=1, maxlen=64, dynamic=True)
    token_ids = np.zeros([len(examples), 64], np.int64)
    word_starts = np.zeros_like(token_ids)
    for row, e in enumerate(examples):
        token_ids[row, : len(e["token_ids"])] = e["token_ids"]
        word_starts[row, : len(e["word_starts"])] = e["word_starts"]
    random_ids = random_token_ids(tokenizer.token_dict)
    whole, whole_labels = dynamic_whole_word_mask(token_ids, word_starts, [5, 6], tokenizer.token_mask_id, random_ids)
    same, same_labels = dynamic_whole_word_mask(
        token_ids, word_starts, [5, 6], tokenizer.token_mask_id, random_ids, char_fraction=0.0
    )
    np.testing.assert_array_equal(whole.numpy(), same.numpy())
    _, labels = dynamic_whole_word_mask(
        token_ids, word_starts, [5, 6], tokenizer.token_mask_id, random_ids, char_fraction=1.0
    )
    selected = labels.numpy() != 0
    in_word = np.zeros_like(selected)
    split_words = 0
    for row, e in enumerate(examples):
        for start, end in _word_spans(e["word_starts"]):
            in_word[row, start:end] = True
            word = selected[row, start:end]
            split_words += bool(word.any() and not word.all())
    assert not selected[~in_word].any()  # never [CLS], [SEP] or padding
    assert abs(selected.sum() / in_word.sum() - 0.15) < 0.015  # mask_prob of the tokens
    assert split_words > 100  # single characters of longer words
    _, half = dynamic_whole_word_mask(
        token_ids, word_starts, [5, 6], tokenizer.token_mask_id, random_ids, char_fraction=0.5
    )
    per_char_rows = [(half.numpy()[row] != whole_labels.numpy()[row]).any() for row in range(len(examples))]
    assert 0.35 < np.mean(per_char_rows) < 0.65
