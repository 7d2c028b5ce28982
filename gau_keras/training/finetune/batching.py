"""Batches of variable-length features, zero-padded to the longest in each batch."""

import math

import numpy as np


def pad_stack(arrays, dtype=None):
    """Stacks arrays of equal rank into one [N, *max shape] array, zero-padded at the end of every axis.

    >>> pad_stack([np.array([1, 2]), np.array([3])])
    array([[1, 2],
           [3, 0]])
    """
    arrays = [np.asarray(a) for a in arrays]
    if not arrays:
        raise ValueError("pad_stack: no arrays")
    ranks = {a.ndim for a in arrays}
    if len(ranks) != 1:
        raise ValueError(f"pad_stack: arrays of different ranks {sorted(ranks)}")
    shape = tuple(max(sizes) for sizes in zip(*(a.shape for a in arrays)))
    out = np.zeros((len(arrays),) + shape, dtype=dtype or arrays[0].dtype)
    for i, a in enumerate(arrays):
        out[(i,) + tuple(slice(0, n) for n in a.shape)] = a
    return out


class PaddedBatches:
    """`Feature`s as batches ``((input_1, ..., input_k), labels)`` of numpy arrays.

    Each input (and the labels) is padded to the longest of its batch. With
    ``shuffle`` every pass of `tf_dataset` (every epoch of ``model.fit``) has
    its own order, a function of ``seed`` and the number of passes completed:
    a pass that is started and abandoned (Keras's JAX trainer starts the
    dataset once more than its epochs, to see a batch) does not move the
    orders on, so an epoch sees the same batches on every backend. Without
    labels a batch is ``((inputs...),)``, what ``model.predict_on_batch``
    takes as ``[0]``.

    ``shard=(n, i)``: process i of n's rows of each batch, the i-th of n equal
    parts, padded as the whole batch is (the n parts, concatenated in process
    order, are the batch); each batch's size must divide by n.
    """

    def __init__(self, features, batch_size, shuffle=False, seed=0, with_labels=True, shard=(1, 0)):
        if not features:
            raise ValueError("PaddedBatches: no features (is the data split empty?)")
        if batch_size < 1:
            raise ValueError(f"PaddedBatches: batch_size must be >= 1, got {batch_size}")
        self.features = features
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.with_labels = with_labels
        self.seed = seed
        self.shard = shard
        self.passes = 0  # passes of tf_dataset run to their end
        self._order = self.order(0)

    def __len__(self):
        return math.ceil(len(self.features) / self.batch_size)

    def order(self, passes):
        """The feature order of the pass after ``passes`` completed ones."""
        if not self.shuffle:
            return np.arange(len(self.features))
        return np.random.default_rng([self.seed, passes]).permutation(len(self.features))

    def batch_indices(self, index):
        return self._order[index * self.batch_size : (index + 1) * self.batch_size]

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"PaddedBatches: batch {index} of {len(self)}")
        batch = [self.features[i] for i in self.batch_indices(index)]
        inputs = tuple(self._rows(pad_stack([f.inputs[k] for f in batch])) for k in range(len(batch[0].inputs)))
        if not self.with_labels:
            return (inputs,)
        return inputs, self._rows(pad_stack([f.label for f in batch]))

    def _rows(self, array):
        """This process's rows of a padded batch [B, ...]: [B / n, ...]."""
        processes, index = self.shard
        if processes == 1:
            return array
        if len(array) % processes:
            raise ValueError(f"PaddedBatches: a batch of {len(array)} rows does not split over {processes} processes")
        rows = len(array) // processes
        return array[index * rows : (index + 1) * rows]

    def tf_dataset(self):
        """A ``tf.data.Dataset`` of the batches, for ``model.fit``.

        Every axis but the rank is left unknown in its signature: batches of
        different lengths then share one traced train step (a Keras
        ``PyDataset`` would fix the lengths of its first batches).
        """
        import tensorflow as tf

        def spec(value):
            value = np.asarray(value)
            return tf.TensorSpec((None,) * (value.ndim + 1), tf.as_dtype(value.dtype))

        first = self.features[0]
        inputs = tuple(spec(a) for a in first.inputs)
        signature = (inputs, spec(first.label)) if self.with_labels else (inputs,)

        def generate():
            self._order = self.order(self.passes)
            for index in range(len(self)):
                yield self[index]
            self.passes += 1  # reached only when the whole pass was taken

        dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
        return dataset.apply(tf.data.experimental.assert_cardinality(len(self))).prefetch(2)
