"""TFRecord shards: write/read round trip (static and dynamic masks), errors."""

import numpy as np
import pytest
import tensorflow as tf

from gau_keras.data.mlm import SequencePacker
from gau_keras.data.tfrecord import ShardedWriter, load_dataset, pair_segment_ids
from gau_keras.tokenizers import Tokenizer


def _examples(rng, n, maxlen):
    examples = []
    for _ in range(n):
        length = int(rng.integers(3, maxlen + 1))
        token_ids = [101] + rng.integers(200, 300, size=length - 2).tolist() + [102]
        labels = [0] + [t if rng.random() < 0.3 else 0 for t in token_ids[1:-1]] + [0]
        starts = [0] + [int(rng.random() < 0.6) for _ in token_ids[1:-1]] + [0]
        starts[1] = 1
        examples.append({"token_ids": token_ids, "labels": labels, "word_starts": starts})
    return examples


def _write(directory, examples, keys, shards=3):
    with ShardedWriter(str(directory), shards) as writer:
        for e in examples:
            writer.write({k: e[k] for k in keys})
    return writer


def test_round_trip_static(tmp_path, rng):
    examples = _examples(rng, 10, 12)
    writer = _write(tmp_path, examples, ("token_ids", "labels"))
    assert writer.count == 10 and len(writer.paths) == 3
    batches = list(load_dataset(str(tmp_path / "*.tfrecord"), batch_size=4, maxlen=12, shuffle=False))
    assert [b[1].shape[0] for b in batches] == [4, 4, 2]
    inputs = np.concatenate([b[0]["Input-Token"].numpy() for b in batches])
    segments = np.concatenate([b[0]["Input-Segment"].numpy() for b in batches])
    labels = np.concatenate([b[1].numpy() for b in batches])
    assert inputs.dtype == np.int32 and inputs.shape == (10, 12) and not segments.any()
    # round robin: shard s holds examples s, s+3, ...; shards are read interleaved
    got = sorted(tuple(row[row != 0]) for row in inputs)
    assert got == sorted(tuple(e["token_ids"]) for e in examples)
    for row, label_row in zip(inputs, labels):
        match = next(e for e in examples if tuple(e["token_ids"]) == tuple(row[row != 0]))
        np.testing.assert_array_equal(label_row[: len(match["labels"])], match["labels"])
        assert not label_row[len(match["labels"]) :].any()


def test_round_trip_dynamic_and_shuffle(tmp_path, rng):
    examples = _examples(rng, 40, 16)
    _write(tmp_path, examples, ("token_ids", "word_starts"), shards=2)
    kwargs = dict(
        batch_size=8,
        maxlen=16,
        dynamic_mask=True,
        mask_token_id=103,
        random_token_ids=np.arange(200, 300),
        seed=5,
        drop_remainder=True,
        mask_prob=0.5,
    )
    first = [(x["Input-Token"].numpy(), y.numpy()) for x, y in load_dataset(str(tmp_path / "shard-*"), **kwargs)]
    second = [(x["Input-Token"].numpy(), y.numpy()) for x, y in load_dataset(str(tmp_path / "shard-*"), **kwargs)]
    assert len(first) == 5
    kwargs["seed"] = 6
    other = [x["Input-Token"].numpy() for x, _ in load_dataset(str(tmp_path / "shard-*"), **kwargs)]
    assert any((a != b).any() for (a, _), b in zip(first, other))
    for (a, la), (b, lb) in zip(first, second):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)
    tokens = np.concatenate([a for a, _ in first])
    labels = np.concatenate([la for _, la in first])
    assert (tokens == 103).any() and (labels != 0).any()
    originals = {tuple(e["token_ids"][1:-1]) for e in examples}
    for row, label_row in zip(tokens, labels):
        restored = np.where(label_row != 0, label_row, row)
        assert tuple(restored[1:][restored[1:] != 0][:-1]) in originals


def test_load_dataset_errors(tmp_path, rng):
    with pytest.raises(FileNotFoundError, match="no files match"):
        load_dataset(str(tmp_path / "none-*"), batch_size=2)
    _write(tmp_path, _examples(rng, 4, 10), ("token_ids", "word_starts"), shards=1)
    with pytest.raises(ValueError, match="mask_token_id"):
        load_dataset(str(tmp_path / "*"), batch_size=2, dynamic_mask=True)
    long = {"token_ids": list(range(1, 11)), "labels": [0] * 10}
    with ShardedWriter(str(tmp_path / "long"), 1) as writer:
        writer.write(long)
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than maxlen=8"):
        list(load_dataset(str(tmp_path / "long" / "*"), batch_size=1, maxlen=8))


def test_a_failed_write_leaves_no_shard_and_foreign_files_are_named(tmp_path, rng):
    with pytest.raises(RuntimeError, match="stop"):
        with ShardedWriter(str(tmp_path / "failed"), 2) as writer:
            writer.write(_examples(rng, 1, 10)[0])
            raise RuntimeError("stop")
    assert list((tmp_path / "failed").iterdir()) == []
    _write(tmp_path / "mixed", _examples(rng, 6, 10), ("token_ids", "labels"), shards=2)
    noise = tmp_path / "mixed" / "shard-00002-of-00003.tfrecord"
    noise.write_bytes(np.random.default_rng(0).bytes(4000))  # a shard of random bytes
    with pytest.raises(ValueError, match=rf"{noise} is not a TFRecord file of MLM examples"):
        load_dataset(str(tmp_path / "mixed" / "*"), batch_size=2, maxlen=10)


def test_pair_segments_are_the_tokenizers_pair_encoding(tmp_path):
    """pair_segments: the segment ids Tokenizer.encode(first, second) gives, on
    packed sequences [CLS] a [SEP] b [SEP] c [SEP] (1 after the first [SEP])."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("今天气很好我爱吃苹果")
    tokenizer = Tokenizer({t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    token_ids, segment_ids = tokenizer.encode("今天气很好", "我爱吃苹果")
    np.testing.assert_array_equal(
        pair_segment_ids([token_ids + [0, 0]], tokenizer.token_sep_id), [segment_ids + [0, 0]]
    )
    packer = SequencePacker(16)
    packed = []
    for text in ("今天", "气很好", "我爱吃苹果"):
        ids, _ = tokenizer.encode(text)
        packed += packer.add({"token_ids": ids, "labels": [0] * len(ids)})
    packed += packer.flush()
    with ShardedWriter(str(tmp_path), 1) as writer:
        for features in packed:
            writer.write(features)
    ((inputs, _),) = load_dataset(
        str(tmp_path / "*"),
        batch_size=4,
        maxlen=16,
        shuffle=False,
        pair_segments=True,
        sep_token_id=tokenizer.token_sep_id,
    )
    tokens, segments = inputs["Input-Token"].numpy()[0], inputs["Input-Segment"].numpy()[0]
    first_sep = list(tokens).index(tokenizer.token_sep_id)
    assert first_sep == 3 and not segments[: first_sep + 1].any()
    np.testing.assert_array_equal(segments[first_sep + 1 :], (tokens[first_sep + 1 :] != 0).astype("int32"))
    assert segments.sum() == 4 + 6  # 气很好[SEP], 我爱吃苹果[SEP]
    ((plain, _),) = load_dataset(str(tmp_path / "*"), batch_size=4, maxlen=16, shuffle=False)
    assert not plain["Input-Segment"].numpy().any()
    with pytest.raises(ValueError, match="pair_segments needs sep_token_id"):
        load_dataset(str(tmp_path / "*"), batch_size=4, maxlen=16, pair_segments=True)
