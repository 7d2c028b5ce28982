"""Sharded TFRecords of MLM examples and the ``tf.data`` reader for pretraining.

Each record is a ``tf.train.Example`` of int64 list features: ``token_ids``
and either ``labels`` (static masks) or ``word_starts`` (dynamic masks, see
``gau_keras.data.mlm``). Paths go through ``tf.io.gfile``, so ``gs://`` works.

    with ShardedWriter("out/", shards=8) as writer:
        writer.write({"token_ids": [...], "labels": [...]})
    dataset = load_dataset("out/shard-*.tfrecord", batch_size=32, maxlen=512)
    # batches: ({'Input-Token': [B, 512], 'Input-Segment': [B, 512]}, labels [B, 512])

Design notes: docs/pretraining.md (Data).
"""

import hashlib
import json
import os

from gau_keras import optional
from gau_keras.data.mlm import dynamic_whole_word_mask
from gau_keras.errors import first_line

tf = optional.tensorflow("pretraining's TFRecord shards and tf.data input (gau_keras.data.tfrecord)")
from google.protobuf.message import DecodeError  # noqa: E402  (protobuf comes with TensorFlow)

SHARD_PATTERN = "shard-*-of-*.tfrecord"
#: what prepare_corpus writes beside the shards (its summary, with the masking parameters)
SUMMARY_NAME = "summary.json"
#: the suffix of a shard while it is being written
TEMP_SUFFIX = ".tmp"
#: whole-word masking parameters and their defaults (GAU-alpha's recipe)
MASKING_DEFAULTS = {"mask_prob": 0.15, "mask_ratio": 0.8, "random_ratio": 0.1}


def shard_name(index, shards):
    return f"shard-{index:05d}-of-{shards:05d}.tfrecord"


def serialize_example(features):
    """``{name: list of ints}`` -> serialized ``tf.train.Example`` bytes."""
    feature = {
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=list(values))) for name, values in features.items()
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


class ShardedWriter:
    """Writes examples round-robin over ``shards`` files in ``output_dir``
    (example i goes to shard i mod shards), so the layout is a pure function
    of the example order.

    The shards are written under temporary names (``<shard>.tmp``, which
    ``SHARD_PATTERN`` does not match) and renamed to their final names only
    when the ``with`` block ends without an error; after an error they are
    removed, so a failed or killed run never leaves a shard that looks whole.
    ``records`` and ``sizes`` then give each shard's record count and bytes.
    """

    def __init__(self, output_dir, shards):
        if shards < 1:
            raise ValueError(f"ShardedWriter: shards must be >= 1, got {shards}")
        tf.io.gfile.makedirs(output_dir)
        self.paths = [tf.io.gfile.join(output_dir, shard_name(i, shards)) for i in range(shards)]
        self._writers = [tf.io.TFRecordWriter(path + TEMP_SUFFIX) for path in self.paths]
        self._counts = [0] * shards
        self.count = 0
        self.records, self.sizes = {}, {}

    def write(self, features):
        index = self.count % len(self._writers)
        self._writers[index].write(serialize_example(features))
        self._counts[index] += 1
        self.count += 1

    def close(self, commit=True):
        """Closes the files; ``commit`` renames them to their final names, else removes them."""
        for writer in self._writers:
            writer.close()
        if self._writers:
            for path, count in zip(self.paths, self._counts):
                if commit:
                    tf.io.gfile.rename(path + TEMP_SUFFIX, path, overwrite=True)
                    name = os.path.basename(path)
                    self.records[name], self.sizes[name] = count, tf.io.gfile.stat(path).length
                elif tf.io.gfile.exists(path + TEMP_SUFFIX):
                    tf.io.gfile.remove(path + TEMP_SUFFIX)
        self._writers = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(commit=exc_type is None)


def _parse(serialized, label_key):
    spec = {"token_ids": tf.io.RaggedFeature(tf.int64), label_key: tf.io.RaggedFeature(tf.int64)}
    return tf.io.parse_single_example(serialized, spec)


def _check_length(features, maxlen):
    length = tf.shape(features["token_ids"])[0]
    assert_op = tf.debugging.assert_less_equal(
        length, maxlen, message=f"load_dataset: an example is longer than maxlen={maxlen}"
    )
    with tf.control_dependencies([assert_op]):
        return {name: tf.identity(value) for name, value in features.items()}


def vocab_checksum(vocab_path):
    """A checksum of a vocab's tokens in id order (recorded by prepare_corpus in
    summary.json, so that shards made with another vocab are recognised)."""
    from gau_keras.tokenizers import load_vocab

    token_dict = load_vocab(vocab_path)
    text = "\n".join(sorted(token_dict, key=token_dict.get))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _first_record(path):
    """The first record of a shard as a ``tf.train.Example`` (None when it is empty);
    a ValueError naming the file when it is not a TFRecord file of examples."""
    try:
        for record in tf.data.TFRecordDataset([path]).take(1):
            return tf.train.Example.FromString(record.numpy())
    except (tf.errors.DataLossError, DecodeError) as e:
        detail = first_line(e)
        raise ValueError(
            f"load_dataset: {path} is not a TFRecord file of MLM examples ({detail}); "
            f"prepare the shards again (prepare_corpus)"
        ) from None
    return None


def shard_format(files):
    """``'static'`` or ``'dynamic'``: which label feature the records of
    ``files`` hold (``labels`` or ``word_starts``). The first record of every
    file is read, so a damaged or foreign file is an error naming it."""
    found = {}
    for path in files:
        example = _first_record(path)
        if example is None:
            continue
        features = example.features.feature
        kind = "dynamic" if "word_starts" in features else "static" if "labels" in features else None
        if kind is None:
            raise ValueError(
                f"load_dataset: {path}: a record has neither 'labels' nor 'word_starts' "
                f"(features {sorted(features)}); not an MLM shard of prepare_corpus"
            )
        found.setdefault(kind, path)
    if len(found) > 1:
        raise ValueError(
            f"load_dataset: {found['static']} holds fixed masks but {found['dynamic']} dynamic "
            f"ones; use shards of one prepare_corpus mode"
        )
    if not found:
        raise ValueError(f"load_dataset: {files[0]} holds no record")
    return next(iter(found))


def _summaries(files):
    """``[(summary.json path, its dict, the files of ``files`` beside it)]`` of the
    folders of ``files`` that have one."""
    found = []
    for directory in sorted({os.path.dirname(path) for path in files}):
        path = tf.io.gfile.join(directory, SUMMARY_NAME)
        if not tf.io.gfile.exists(path):
            continue
        try:
            with tf.io.gfile.GFile(path) as f:
                summary = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"load_dataset: {path} is not valid JSON: {e}") from e
        if isinstance(summary, dict):
            found.append((path, summary, [p for p in files if os.path.dirname(p) == directory]))
    return found


def check_shards(files, vocab=None):
    """The shards against the summary.json beside them: each shard's size (a
    truncated or replaced shard), and with ``vocab`` (a vocab.txt path) the
    vocab they were made with. Errors name the shard or both files."""
    summaries = _summaries(files)
    for summary_path, summary, beside in summaries:
        sizes, records = summary.get("shard_bytes") or {}, summary.get("shard_records") or {}
        for path in beside:
            name = os.path.basename(path)
            if name in sizes and tf.io.gfile.stat(path).length != sizes[name]:
                raise ValueError(
                    f"load_dataset: {path} is {tf.io.gfile.stat(path).length} bytes but {summary_path} "
                    f"records {sizes[name]} bytes ({records.get(name, '?')} records): the shard is "
                    f"truncated or was replaced; prepare the shards again"
                )
        if vocab is not None and summary.get("vocab_checksum"):
            checksum = vocab_checksum(vocab)
            if checksum != summary["vocab_checksum"]:
                from gau_keras.tokenizers import load_vocab

                raise ValueError(
                    f"load_dataset: the shards were made with another vocab: {summary_path} records "
                    f"a vocab of {summary.get('vocab_size')} tokens ({summary.get('vocab')}), "
                    f"but {vocab} has {len(load_vocab(vocab))} tokens (checksums differ); "
                    f"prepare the shards with {vocab} or train with their vocab"
                )
    return summaries


def masking_of_shards(files):
    """The masking parameters recorded in the ``summary.json`` beside ``files``
    (``{}`` when there is none); shards from different runs must agree."""
    found = {}
    for path, summary, _ in _summaries(files):
        masking = {k: summary[k] for k in MASKING_DEFAULTS if k in summary}
        if found and masking and masking != found:
            raise ValueError(f"load_dataset: {path} records masking {masking}, other shards {found}")
        found = found or masking
    return found


def _masking(files, mask_prob, mask_ratio, random_ratio):
    recorded = masking_of_shards(files)
    given = {"mask_prob": mask_prob, "mask_ratio": mask_ratio, "random_ratio": random_ratio}
    values = {}
    for key, default in MASKING_DEFAULTS.items():
        if given[key] is not None and key in recorded and abs(given[key] - recorded[key]) > 1e-12:
            raise ValueError(
                f"load_dataset: {key}={given[key]} but the shards' {SUMMARY_NAME} "
                f"({os.path.dirname(files[0])}) records {key}={recorded[key]}"
            )
        values[key] = given[key] if given[key] is not None else recorded.get(key, default)
    return values["mask_prob"], values["mask_ratio"], values["random_ratio"]


def load_dataset(
    file_pattern,
    batch_size,
    maxlen=512,
    dynamic_mask=None,
    shuffle=True,
    shuffle_buffer=10000,
    seed=0,
    repeat=False,
    drop_remainder=False,
    mask_token_id=None,
    random_token_ids=None,
    mask_prob=None,
    mask_ratio=None,
    random_ratio=None,
    char_mask_fraction=0.0,
    pair_segments=False,
    sep_token_id=None,
    vocab=None,
):
    """MLM batches from TFRecord shards.

    Args:
        file_pattern: glob (or list of globs) of shards, local or ``gs://``.
        batch_size: examples per batch; every batch is padded to ``maxlen``.
        maxlen: padded length; a longer example raises an error.
        dynamic_mask: the shards hold ``word_starts`` and masks are drawn here
            (needs ``mask_token_id`` and ``random_token_ids``, e.g. from
            ``tokenizer.token_mask_id`` and ``mlm.random_token_ids(vocab)``);
            False: they hold fixed ``labels``; None (default): whichever the
            shards hold.
        mask_prob, mask_ratio, random_ratio: dynamic masking's parameters;
            None (default) takes those recorded in the shards' summary.json
            (prepare_corpus ``--mask-prob`` ...), else 0.15 / 0.8 / 0.1. A
            value that contradicts the recorded one is an error.
        char_mask_fraction: dynamic masks only: the fraction of sequences masked
            per token instead of per word (``mlm.dynamic_whole_word_mask``'s
            ``char_fraction``).
        pair_segments: segment id 1 on every token after the first [SEP]
            (``sep_token_id``), as a tokenizer's pair encoding gives the second
            text; packed sequences ``[CLS] a [SEP] b [SEP] c [SEP]`` then train
            the segment-1 embedding. False (default, bert4keras's pretraining):
            every segment id 0, and the segment-1 embedding keeps its random
            initialisation.
        shuffle, shuffle_buffer, seed: file order and example shuffling; the
            order is a function of ``seed`` (and so are the dynamic masks, which
            differ per example and per epoch).
        repeat: cycle forever (each epoch reshuffled and re-masked).
        drop_remainder: drop the last partial batch (static shapes for TPU).
        vocab: the vocab.txt the batches are for: an error when the shards'
            summary.json records another (``check_shards``, which also checks
            every shard's size against the summary).
    Returns:
        ``tf.data.Dataset`` of ``({'Input-Token': int32 [B, maxlen],
        'Input-Segment': int32 [B, maxlen]}, labels int32 [B, maxlen])``.
    """
    files = _shard_files(file_pattern)
    check_shards(files, vocab)
    dynamic_mask = _follow_shards(files, dynamic_mask)
    if dynamic_mask and (mask_token_id is None or random_token_ids is None):
        raise ValueError("load_dataset: dynamic masks need mask_token_id and random_token_ids")
    if not 0 <= char_mask_fraction <= 1:
        raise ValueError(f"load_dataset: char_mask_fraction={char_mask_fraction}: expected a fraction in [0, 1]")
    if char_mask_fraction and not dynamic_mask:
        raise ValueError(
            f"load_dataset: char_mask_fraction={char_mask_fraction} needs shards of dynamic masks; "
            f"{files[0]} holds fixed masks"
        )
    if pair_segments and sep_token_id is None:
        raise ValueError("load_dataset: pair_segments needs sep_token_id (e.g. tokenizer.token_sep_id)")
    masking = _masking(files, mask_prob, mask_ratio, random_ratio)
    dataset = _examples(
        files, "word_starts" if dynamic_mask else "labels", maxlen, shuffle, shuffle_buffer, seed, repeat
    )
    if dynamic_mask:
        dataset = _masked(dataset, seed, mask_token_id, random_token_ids, *masking, char_mask_fraction)
    else:
        dataset = dataset.map(lambda features: (features["token_ids"], features["labels"]))
    dataset = dataset.map(lambda token_ids, labels: (tf.cast(token_ids, tf.int32), tf.cast(labels, tf.int32)))
    dataset = dataset.padded_batch(batch_size, padded_shapes=([maxlen], [maxlen]), drop_remainder=drop_remainder)
    dataset = dataset.map(
        lambda token_ids, labels: (
            {
                "Input-Token": token_ids,
                "Input-Segment": pair_segment_ids(token_ids, sep_token_id)
                if pair_segments
                else tf.zeros_like(token_ids),
            },
            labels,
        )
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def pair_segment_ids(token_ids, sep_token_id):
    """int32 [..., L]: 0 up to and including the first ``sep_token_id``, 1 on the
    tokens after it, 0 on padding (id 0) — ``Tokenizer.encode(first, second)``'s
    segment ids for ``[CLS] first [SEP] second [SEP]``."""
    token_ids = tf.convert_to_tensor(token_ids)
    seps_before = tf.cumsum(tf.cast(tf.equal(token_ids, sep_token_id), tf.int32), axis=-1, exclusive=True)
    return tf.cast((seps_before > 0) & (token_ids != 0), tf.int32)


def _shard_files(file_pattern):
    """The sorted files matching a glob or a list of globs (an error if none)."""
    patterns = [file_pattern] if isinstance(file_pattern, str) else list(file_pattern)
    files = sorted(path for pattern in patterns for path in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"load_dataset: no files match file_pattern={file_pattern!r}")
    return files


def _follow_shards(files, dynamic_mask):
    """Whether the shards hold dynamic masks; an error if ``dynamic_mask`` says otherwise."""
    found = shard_format(files)
    if dynamic_mask is not None and found != ("dynamic" if dynamic_mask else "static"):
        raise ValueError(
            f"load_dataset: dynamic_mask={dynamic_mask} but {files[0]} holds {found} masks "
            f"({'word_starts' if found == 'dynamic' else 'labels'}); leave dynamic_mask unset "
            f"to follow the shards"
        )
    return found == "dynamic"


def _examples(files, label_key, maxlen, shuffle, shuffle_buffer, seed, repeat):
    """Parsed examples ({'token_ids', label_key}: int64 [n]) in a ``seed``-determined order."""
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(len(files), 16),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    dataset = dataset.map(
        lambda record: _check_length(_parse(record, label_key), maxlen),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    return dataset


def _masked(dataset, seed, mask_token_id, random_token_ids, mask_prob, mask_ratio, random_ratio, char_fraction):
    """(token_ids, labels) with whole-word masks drawn per example: the element index
    (over all epochs) and ``seed`` seed each example's mask."""
    random_ids = tf.constant(random_token_ids, tf.int64)

    def mask(index, features):
        return dynamic_whole_word_mask(
            features["token_ids"],
            features["word_starts"],
            tf.stack([tf.cast(seed, tf.int64), index]),
            mask_token_id,
            random_ids,
            mask_prob,
            mask_ratio,
            random_ratio,
            char_fraction,
        )

    return dataset.enumerate().map(mask, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
