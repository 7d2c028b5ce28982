"""gau_keras.snippets.DataGenerator: sampling, forfit/fortest under Keras 3's
fit/predict (the bert4keras idioms), to_dataset. Sampling parity with
bert4keras: tests/snippets/test_parity.py."""

import itertools

import keras
import numpy as np
import pytest

from gau_keras.snippets import DataGenerator, parallel_apply_generator, sequence_padding

# token lengths chosen so that the first two batches (batch_size 2) pad to the same length
TEXTS = [[1, 2, 3], [4, 5], [6, 7, 8], [9], [1, 2, 3, 4, 5, 6], [7, 8], [3]]
LABELS = [0, 1, 1, 0, 1, 0, 1]
DATA = list(zip(TEXTS, LABELS))


class PairBatches(DataGenerator):
    """The classification idiom: ``yield [token_ids, segment_ids], labels``."""

    def __iter__(self, random=False):
        tokens, labels = [], []
        for is_end, (ids, label) in self.sample(random):
            tokens.append(ids)
            labels.append([label])
            if len(tokens) == self.batch_size or is_end:
                tokens = sequence_padding(tokens)
                yield [tokens, np.zeros_like(tokens)], sequence_padding(labels)
                tokens, labels = [], []


class LossLayerBatches(PairBatches):
    """The Loss-layer idiom: labels among the inputs, ``None`` as targets."""

    def __iter__(self, random=False):
        for (tokens, segments), labels in super().__iter__(random):
            yield [tokens, segments, labels.astype("float32")], None


class Samples(DataGenerator):
    """One sample per item, for to_dataset."""

    def __iter__(self, random=False):
        for _, (ids, label) in self.sample(random):
            yield [ids, [0] * len(ids)], [[label]]


def test_steps_len_and_sample_flags():
    g = PairBatches(DATA, 3)
    assert g.steps == len(g) == 3 and g.buffer_size == 3000
    flags = list(g.sample())
    assert [d for _, d in flags] == DATA
    assert [end for end, _ in flags] == [False] * 6 + [True]
    np.random.seed(0)
    shuffled = [d for _, d in g.sample(random=True)]
    assert shuffled != DATA and sorted(shuffled) == sorted(DATA)
    assert list(DataGenerator([], 2).sample()) == []


def test_stream_without_length():
    g = PairBatches(iter(DATA * 3), 2, buffer_size=4)
    assert g.steps is None
    with pytest.raises(TypeError, match="no length"):
        len(g)
    np.random.seed(1)
    drawn = [d for _, d in g.sample(random=True)]
    assert sorted(drawn) == sorted(DATA * 3) and drawn != DATA * 3


def test_abstract_iter_and_empty_data_are_clear_errors():
    with pytest.raises(NotImplementedError, match="__iter__"):
        next(DataGenerator(DATA).forfit())
    with pytest.raises(ValueError, match="no batch"):
        next(PairBatches([], 2).forfit())


def test_forfit_and_fortest_iterated_directly_are_bert4keras_batches():
    g = PairBatches(DATA, 2)
    batches = list(itertools.islice(g.forfit(random=False), 5))
    assert isinstance(batches[0][0], list) and batches[0][0][0].tolist() == [[1, 2, 3], [4, 5, 0]]
    assert batches[4][0][0].tolist() == [[1, 2, 3], [4, 5, 0]]  # endless: a new pass
    inputs = next(g.fortest())
    assert isinstance(inputs, list) and len(inputs) == 2


def _pair_model():
    tokens = keras.Input((None,), dtype="int32")
    segments = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(10, 4)(tokens) + keras.layers.Embedding(2, 4)(segments)
    probas = keras.layers.Dense(1, activation="sigmoid")(keras.layers.GlobalAveragePooling1D()(x))
    return keras.Model([tokens, segments], probas)


def test_fit_and_predict_with_list_inputs_and_varying_lengths():
    g = PairBatches(DATA, 2)
    model = _pair_model()
    model.compile("adam", "binary_crossentropy")
    # batches pad to 3, 3, 6, 1 tokens: Keras 3 alone fixes the length from the first two
    history = model.fit(g.forfit(random=False), steps_per_epoch=len(g), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
    probas = model.predict(g.fortest(), steps=len(g), verbose=0)
    assert probas.shape == (len(DATA), 1)
    direct = model.predict([sequence_padding(TEXTS[:2]), np.zeros((2, 3), "int32")], verbose=0)
    assert np.allclose(probas[:2], direct, atol=1e-6)


def test_fit_with_sparse_crossentropy_on_label_column_targets():
    """bert4keras's commonest idiom: ``[[label]]`` targets [B, 1] against softmax outputs
    [B, C]; Keras 3 squeezes the target only when its trailing 1 is static."""
    tokens = keras.Input((None,), dtype="int32")
    segments = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(10, 4)(tokens) + keras.layers.Embedding(2, 4)(segments)
    probas = keras.layers.Dense(2, activation="softmax")(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model([tokens, segments], probas)
    model.compile("adam", "sparse_categorical_crossentropy")
    g = PairBatches(DATA, 2)
    history = model.fit(g.forfit(random=False), steps_per_epoch=len(g), epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


class _LabelLoss(keras.layers.Layer):
    def call(self, inputs):
        labels, probas = inputs
        self.add_loss(keras.ops.mean(keras.losses.binary_crossentropy(labels, probas)))
        return probas


def test_fit_with_none_targets_for_a_loss_layer_model():
    base = _pair_model()
    labels = keras.Input((1,))
    output = _LabelLoss()([labels, base.output])
    model = keras.Model(base.inputs + [labels], output)
    model.compile("adam")
    g = LossLayerBatches(DATA, 3)
    before = model.evaluate(g.forfit(random=False), steps=len(g), verbose=0)
    model.fit(g.forfit(), steps_per_epoch=len(g), epochs=3, verbose=0)
    after = model.evaluate(g.forfit(random=False), steps=len(g), verbose=0)
    assert after < before


def test_to_dataset_names_and_padded_batch():
    g = Samples(DATA, 3)
    dataset = g.to_dataset(
        types=[("float32", "float32"), ("float32",)],
        shapes=[([None], [None]), ([1],)],
        names=[("Input-Token", "Input-Segment"), ("Probas",)],
        padded_batch=True,
    )
    x, y = next(iter(dataset))
    assert set(x) == {"Input-Token", "Input-Segment"}
    tokens = x["Input-Token"].numpy()
    assert tokens.shape[0] == 3 and tokens.dtype == np.float32 and y.shape == (3, 1)  # one target: bare
    lengths = (tokens != 0).sum(1)
    assert tokens.shape[1] == lengths.max()
    rows = {tuple(TEXTS[i]): LABELS[i] for i in range(len(DATA))}
    for row, length, label in zip(tokens, lengths, y.numpy()[:, 0]):
        assert rows[tuple(int(t) for t in row[:length])] == label


def test_to_dataset_trains_a_model_by_input_and_output_names():
    """task_iflytek_multigpu.py's pattern: inputs and the one output named."""
    tokens = keras.Input((None,), name="Input-Token")
    segments = keras.Input((None,), name="Input-Segment")
    x = keras.layers.Embedding(10, 4)(tokens) + keras.layers.Embedding(2, 4)(segments)
    probas = keras.layers.Dense(2, activation="softmax", name="Probas")(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model([tokens, segments], probas)
    model.compile("adam", "sparse_categorical_crossentropy")
    g = Samples(DATA, 2)
    dataset = g.to_dataset(
        types=[("float32", "float32"), ("float32",)],
        shapes=[([None], [None]), ([1],)],
        names=[("Input-Token", "Input-Segment"), ("Probas",)],
        padded_batch=True,
    )
    history = model.fit(dataset, steps_per_epoch=len(g), epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


def test_to_dataset_single_names_and_fixed_shapes():
    class Tokens(DataGenerator):
        def __iter__(self, random=False):
            for _, (ids, _) in self.sample(random):
                yield (ids + [0] * 6)[:6]

    dataset = Tokens(DATA, 4).to_dataset(types="int32", shapes=[6], names="Input-Token")
    batch = next(iter(dataset))
    assert list(batch) == ["Input-Token"] and batch["Input-Token"].shape == (4, 6)
    plain = Samples(DATA[:1], 2).to_dataset(types=(("int32", "int32"), ("int32",)), shapes=(([3], [3]), ([1],)))
    (tokens, segments), (labels,) = next(iter(plain))
    assert tokens.numpy().tolist() == [[1, 2, 3], [1, 2, 3]] and labels.numpy().tolist() == [[0], [0]]


def test_to_dataset_over_parallel_apply_generator_as_gau_alpha_train_py():
    """GAU-alpha's train.py: __iter__ maps a closure over sample() in worker processes."""
    offset = 100

    class Encoded(DataGenerator):
        def __iter__(self, random=False):
            def encode(is_end_text):
                _, (ids, label) = is_end_text
                return [i + offset for i in ids], [0] * len(ids), [label] * len(ids)

            for _, d in parallel_apply_generator(
                func=encode, iterable=self.sample(random), workers=2, max_queue_size=8
            ):
                yield d

    dataset = Encoded(DATA, 4, 10).to_dataset(
        types=("float32", "float32", "float32"),
        shapes=([None], [None], [None]),
        names=("Input-Token", "Input-Segment", "Input-Label"),
        padded_batch=True,
    )
    seen = set()
    for batch in dataset.take(4):
        tokens, labels = batch["Input-Token"].numpy(), batch["Input-Label"].numpy()
        assert tokens.shape == labels.shape == batch["Input-Segment"].shape and tokens.shape[0] == 4
        for row in tokens:
            seen.add(tuple(int(t) - offset for t in row if t))
    assert seen == {tuple(t) for t in TEXTS}


# ---------------------------------------------------------------- bad input (issue 36)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"batch_size": None}, "batch_size must be a positive integer, got None"),
        ({"batch_size": -1}, "batch_size must be a positive integer, got -1"),
        ({"batch_size": 2.5}, "batch_size must be a positive integer, got 2.5"),
        ({"batch_size": 2, "buffer_size": 0}, "buffer_size must be a positive integer, got 0"),
    ],
)
def test_batch_and_buffer_sizes_are_checked_where_given(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataGenerator([1, 2, 3], **kwargs)


def test_a_one_shot_generator_is_named_on_its_second_pass():
    class Rows(DataGenerator):
        def __iter__(self, random=False):
            for _, row in self.sample(random):
                yield row

    once = Rows((i for i in range(3)), batch_size=2)
    assert list(once) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"its data is a one-shot iterator \(generator\), used up by the first pass"):
        list(once)
    again = Rows([0, 1, 2], batch_size=2)
    assert list(again) == list(again) == [0, 1, 2]


def test_a_reader_that_rewinds_in_iter_is_read_again_without_duplicates():
    """A common reader: __iter__ rewinds and returns itself. Every epoch reads it once, whole."""

    class Reader:
        def __init__(self, rows):
            self.rows, self.at = rows, 0

        def __iter__(self):
            self.at = 0
            return self

        def __next__(self):
            if self.at == len(self.rows):
                raise StopIteration
            self.at += 1
            return self.rows[self.at - 1]

    class Rows(DataGenerator):
        def __iter__(self, random=False):
            for _, row in self.sample(random):
                yield row

    rows = Rows(Reader([1, 2, 3, 4, 5]), batch_size=2)
    assert list(rows) == list(rows) == [1, 2, 3, 4, 5]


# ---------------------------------------------------------------- issue 51: an endless generator under tf.data


def endless_corpus():
    """GAU-alpha's corpus(): ``while True`` over the documents, never used up."""
    while True:
        yield from ([1, 2, 3], [4, 5], [6, 7, 8, 9], [3])


class MaskedSamples(DataGenerator):
    """One sample at a time, (token ids, segment ids, labels), as GAU-alpha's train.py yields them."""

    def __iter__(self, random=False):
        for _, ids in self.sample(random):
            yield ids, [0] * len(ids), ids


def loss_layer_model():
    from gau_keras.layers import Loss

    class TokenLoss(Loss):
        def compute_loss(self, inputs, mask=None):
            y_true, y_pred = inputs
            return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True))

    token = keras.Input((None,), name="Input-Token")
    segment = keras.Input((None,), name="Input-Segment")
    label = keras.Input((None,), name="Input-Label")
    hidden = keras.layers.Embedding(10, 8)(keras.ops.cast(token + segment, "int32"))
    logits = keras.layers.Dense(10)(hidden)
    model = keras.Model([token, segment, label], TokenLoss(1)([label, logits]))
    model.compile(optimizer="adam")
    return model


@pytest.mark.both_backends
def test_an_endless_generator_trains_epoch_after_epoch_through_to_dataset():
    """tf.data calls the dataset's generator function again for each iterator (each epoch here);
    an endless generator is read on where it was, not refused as used up (issue 51)."""
    generator = MaskedSamples(endless_corpus(), batch_size=2)
    dataset = generator.to_dataset(
        types=("float32", "float32", "float32"),
        shapes=([None], [None], [None]),
        names=("Input-Token", "Input-Segment", "Input-Label"),
        padded_batch=True,
    )
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
            model = loss_layer_model()
    else:
        model = loss_layer_model()
    history = model.fit(dataset, steps_per_epoch=3, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.all(np.isfinite(history.history["loss"]))
    next(iter(dataset))  # a new iterator: tf.data calls the generator function again
    assert generator._passes >= 2
