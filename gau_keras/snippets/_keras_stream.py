"""The iterator ``DataGenerator.forfit`` / ``fortest`` return: a plain
iterator over the generator's batches that Keras 3's ``fit``/``predict`` also
take as their data adapter, reading converted batches declared by rank only.

This is the one place that uses Keras's data-adapter internals (``keras.src``);
``data_generator`` falls back to a plain generator when they cannot be imported.
"""

from keras.src.trainers.data_adapters import data_adapter_utils
from keras.src.trainers.data_adapters.data_adapter import DataAdapter
from keras.src.trainers.data_adapters.generator_data_adapter import GeneratorDataAdapter


def _rank_only(spec):
    """A dense ``tf.TensorSpec`` with every axis unknown (Keras 2 declared generator
    batches so) except axes of size 1 in every first batch: a ``[[label]]`` target's
    trailing 1 must stay static for Keras 3's sparse crossentropy to squeeze it."""
    import tensorflow as tf

    if type(spec) is tf.TensorSpec and spec.shape.rank is not None:
        return tf.TensorSpec([1 if size == 1 else None for size in spec.shape.as_list()], spec.dtype)
    return spec


class KerasBatches(DataAdapter):
    """Iterates ``batches`` as they are; Keras reads ``convert(batch)`` of each instead.

    Args:
        batches: an iterator of batches in bert4keras's form.
        convert: batch -> the tuple Keras expects, ``(x, y)`` or ``(x,)``.
    """

    def __init__(self, batches, convert):
        self._batches = batches
        self._convert = convert

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._batches)

    def close(self):
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()

    def _converted(self):
        for batch in self._batches:
            yield self._convert(batch)

    def get_tf_dataset(self):
        import tensorflow as tf

        adapter = GeneratorDataAdapter(self._converted())
        spec = data_adapter_utils.get_tensor_spec(adapter._first_batches)
        adapter._output_signature = tf.nest.map_structure(_rank_only, spec)
        return adapter.get_tf_dataset()

    def get_numpy_iterator(self):
        return data_adapter_utils.get_numpy_iterator(self._converted())

    def get_jax_iterator(self):
        return data_adapter_utils.get_jax_iterator(self._converted())

    def get_torch_dataloader(self):
        return data_adapter_utils.get_torch_dataloader(self._converted())

    @property
    def num_batches(self):
        return None

    @property
    def batch_size(self):
        return None

    @property
    def has_partial_batch(self):
        return None

    @property
    def partial_batch_size(self):
        return None
