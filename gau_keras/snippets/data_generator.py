"""bert4keras's ``DataGenerator``: subclass it, write ``__iter__`` to yield
batches, train with ``model.fit(gen.forfit(), steps_per_epoch=len(gen))``.

    class data_generator(DataGenerator):
        def __iter__(self, random=False):
            batch_token_ids, batch_labels = [], []
            for is_end, (text, label) in self.sample(random):
                ...
                if len(batch_token_ids) == self.batch_size or is_end:
                    yield [sequence_padding(batch_token_ids)], sequence_padding(batch_labels)
                    batch_token_ids, batch_labels = [], []

Keras 3 differs from the Keras 2 that such code was written for in three ways
that ``forfit`` / ``fortest`` absorb, so the code above works unchanged:

* it wants each batch as a tuple: a list ``[token_ids, segment_ids]`` (the
  idiom) is taken as one tensor. The batches Keras reads are converted: every
  list holding arrays (or None) becomes a tuple, a list of plain numbers an
  array. ``(x, None)``, the idiom for models whose loss is a layer, is kept.
* it fixes every axis of the batches' shapes from the first two batches, so a
  later batch padded to another length fails. As Keras 2 did, the batches are
  declared with only their rank known.
* ``predict`` reads a generator's tuple as (x, y): ``fortest`` hands Keras
  ``(x,)``.

Iterated directly (``next(gen.forfit())``) they yield the batches exactly as
``__iter__`` makes them, as in bert4keras.
"""

import inspect
import types

import numpy as np

from gau_keras.snippets.text import is_string


class DataGenerator:
    """Batches of ``data`` for training; subclasses define ``__iter__``.

    Args:
        data: a list (or anything with ``__len__`` and ``__getitem__``), or
            an iterable without length (read as a stream).
        batch_size: samples per batch; ``len(gen)`` is the number of batches.
        buffer_size: for a stream, how many samples ``sample(random=True)``
            shuffles among (default ``batch_size * 1000``).
    """

    def __init__(self, data, batch_size=32, buffer_size=None):
        for name, value in (("batch_size", batch_size), ("buffer_size", buffer_size)):
            if value is None and name == "buffer_size":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{type(self).__name__}: {name} must be a positive integer, got {value!r}")
        self.data = data
        self.batch_size = batch_size
        self._passes = 0
        if hasattr(data, "__len__"):
            self.steps = -(-len(data) // batch_size)
        else:
            self.steps = None
        self.buffer_size = buffer_size or batch_size * 1000

    def __len__(self):
        if self.steps is None:
            raise TypeError(
                f"{type(self).__name__}: its data has no length, so neither has the generator; "
                f"give fit a steps_per_epoch"
            )
        return self.steps

    def sample(self, random=False):
        """Yields ``(is_end, sample)`` for each sample, ``is_end`` True for the last.

        ``random``: a random permutation of a list; for a stream, samples are
        drawn at random from a buffer of ``buffer_size`` (numpy's global RNG).
        A generator is read on where the last pass left it (tf.data and an
        endless ``while True`` corpus start a pass per iterator, as bert4keras
        lets them); only one that is used up is refused.
        """
        if self._passes and _used_up(self.data):
            raise ValueError(self._one_shot_message())
        self._passes += 1
        if not random:
            # one iter() call: a reader whose __iter__ rewinds and returns itself must not rewind
            # again after its first sample (the for loop below calls iter() on what it is given)
            samples = (d for d in self.data)
        elif self.steps is None:
            samples = self._buffer_shuffled()
        else:
            samples = (self.data[i] for i in np.random.permutation(len(self.data)))
        try:
            current = next(samples)
        except StopIteration:
            return
        for following in samples:
            yield False, current
            current = following
        yield True, current

    def _buffer_shuffled(self):
        """The stream, shuffled within a window of ``buffer_size`` samples."""
        buffer, full = [], False
        for d in self.data:
            buffer.append(d)
            if full:
                yield buffer.pop(np.random.randint(len(buffer)))
            elif len(buffer) == self.buffer_size:
                full = True
        while buffer:
            yield buffer.pop(np.random.randint(len(buffer)))

    def __iter__(self, random=False):
        """Yields the batches of one pass; to be written by the subclass."""
        raise NotImplementedError(f"{type(self).__name__} must define __iter__(self, random=False)")

    def _forever(self, random):
        """The batches of ``__iter__``, pass after pass."""
        while True:
            empty = True
            for d in self.__iter__(random):
                empty = False
                yield d
            if empty:
                if self._passes > 1 and not hasattr(self.data, "__len__"):
                    raise ValueError(self._one_shot_message())
                raise ValueError(f"{type(self).__name__}.__iter__ yielded no batch (is its data empty?)")

    def _one_shot_message(self):
        return (
            f"{type(self).__name__}: its data is a one-shot iterator ({type(self.data).__name__}), used up by "
            f"the first pass; give a list (or an iterable that can be read again) to read it again"
        )

    def forfit(self, random=True):
        """Endless batches for ``model.fit`` (shuffled by default); see the module notes."""
        return _keras_batches(self._forever(random), _as_fit_batch)

    def fortest(self, random=False):
        """Endless inputs (the first item of each batch) for ``model.predict``."""
        return _keras_batches((d[0] for d in self._forever(random)), _as_predict_batch)

    def to_dataset(self, types, shapes, names=None, padded_batch=False):
        """A ``tf.data.Dataset`` of this generator's samples, batched.

        ``__iter__`` should then yield single samples. ``types`` and ``shapes``
        describe one sample (same structure: e.g. ``('float32', 'float32')``
        and ``([None], [None])``). With ``names`` (a name, names, or a tuple of
        tuples of names) each sample becomes a dict keyed by them, e.g. the
        model's input layer names. ``padded_batch=True`` pads each batch to its
        longest sample (``shapes`` then give the padded shapes, None = longest);
        otherwise samples must match ``shapes`` and are batched as they are.
        With names for (inputs, targets), a target group of one name gives the
        bare tensor, not a one-key dict: Keras 3's fit cannot match a dict
        target to a single-output model.
        """
        import tensorflow as tf

        name = (lambda d: d) if names is None else (lambda d: _single_targets_bare(_named(names, d)))
        types, shapes = name(types), name(shapes)

        def generator():
            for d in self._forever(True):
                yield _conform(name(d), types)

        if padded_batch:
            signature = _map_leaves(lambda t, s: tf.TensorSpec(None, tf.as_dtype(t)), types, shapes)
            padded = _map_leaves(lambda t, s: tf.TensorShape(s), types, shapes)
            dataset = tf.data.Dataset.from_generator(generator, output_signature=signature)
            return dataset.padded_batch(self.batch_size, padded)
        signature = _map_leaves(lambda t, s: tf.TensorSpec(s, tf.as_dtype(t)), types, shapes)
        dataset = tf.data.Dataset.from_generator(generator, output_signature=signature)
        return dataset.batch(self.batch_size)


def _used_up(data):
    """Whether ``data`` is a generator that has run to its end (or was closed)."""
    return isinstance(data, types.GeneratorType) and inspect.getgeneratorstate(data) == inspect.GEN_CLOSED


def _named(names, values):
    """bert4keras's naming of a sample: a dict, or a tuple of dicts, keyed by ``names``."""
    if is_string(names):
        return {names: values}
    if is_string(names[0]):
        return dict(zip(names, values))
    return tuple(dict(zip(keys, group)) for keys, group in zip(names, values))


def _single_targets_bare(sample):
    """In an (inputs, targets, ...) tuple of dicts, a one-name dict after the inputs -> its value.

    Keras 3 cannot match a dict target to a model with a single output (Keras 2
    matched it by the output's name); with one name that output is the only match.
    """
    if not isinstance(sample, tuple):
        return sample
    return sample[:1] + tuple(next(iter(d.values())) if len(d) == 1 else d for d in sample[1:])


def _map_leaves(func, types, *others):
    """``func(type, *other leaves)`` over the structure of ``types`` (lists read as tuples)."""
    if isinstance(types, dict):
        return {k: _map_leaves(func, types[k], *(o[k] for o in others)) for k in types}
    if isinstance(types, (list, tuple)):
        return tuple(_map_leaves(func, t, *o) for t, *o in zip(types, *others))
    return func(types, *others)


def _conform(value, types):
    """``value`` with tuples and dicts where ``types`` has them (tf.data reads lists as tensors)."""
    if isinstance(types, dict):
        return {k: _conform(value[k], types[k]) for k in types}
    if isinstance(types, (list, tuple)):
        if len(value) != len(types):
            raise ValueError(f"to_dataset: a sample has {len(value)} parts where types has {len(types)}: {types!r}")
        return tuple(_conform(v, t) for v, t in zip(value, types))
    return value


def _is_structure(x):
    """True for what Keras reads as several tensors: a list/tuple holding arrays, dicts or None."""
    if x is None or isinstance(x, dict) or hasattr(x, "shape"):
        return True
    return isinstance(x, (list, tuple)) and any(_is_structure(item) for item in x)


def _as_keras(x):
    """Lists/tuples of arrays -> tuples, lists of numbers -> arrays, recursively."""
    if isinstance(x, dict):
        return {k: _as_keras(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return tuple(_as_keras(item) for item in x) if _is_structure(x) else np.asarray(x)
    return x


def _as_fit_batch(batch):
    """A batch as ``fit`` reads it: the tuple ``(x, y[, sample_weight])``."""
    if isinstance(batch, (list, tuple)):
        return tuple(_as_keras(part) for part in batch)
    return (_as_keras(batch),)


def _as_predict_batch(inputs):
    """The model inputs of a batch as ``predict`` reads them: ``(x,)``."""
    return (_as_keras(inputs),)


def _keras_batches(batches, convert):
    """An iterator over ``batches`` that ``fit``/``predict`` also read as converted batches."""
    try:
        from gau_keras.snippets._keras_stream import KerasBatches
    except ImportError:  # a Keras without the data-adapter internals: plain converted batches
        return (convert(b) for b in batches)
    return KerasBatches(batches, convert)
