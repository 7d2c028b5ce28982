"""Keras's AdamW, given dense gradients.

On TensorFlow an ``Embedding``'s gradient is a ``tf.IndexedSlices`` with one
slice per looked-up token, so a token seen twice in a batch has two slices.
Keras 3's Adam and AdamW square the gradient with ``ops.square``, which on
IndexedSlices squares each slice before the repeated rows are summed: the
second moment of such a row gets g₁² + g₂² instead of (g₁ + g₂)², and the
update differs from the one a dense gradient (JAX; Keras 2 and bert4keras)
gives. `DenseAdamW` sums the slices into a dense gradient first (the update
of the moments is dense anyway). gau_keras's own optimizers (bert4keras's
Adam, LAMB, Lion, AdaFactor and the factories) handle IndexedSlices already.
"""

import keras

from gau_keras.registration import PACKAGE


def dense(gradient):
    """``gradient`` as a dense tensor: a tf.IndexedSlices with the rows that repeat summed
    (other backends have no IndexedSlices; Keras's convert_to_tensor keeps them)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if isinstance(gradient, tf.IndexedSlices):
            return tf.convert_to_tensor(gradient)
    return gradient


@keras.saving.register_keras_serializable(package=PACKAGE)
class DenseAdamW(keras.optimizers.AdamW):
    """``keras.optimizers.AdamW`` with the same arguments, applied to dense gradients."""

    def apply(self, grads, trainable_variables=None):
        return super().apply([dense(g) for g in grads], trainable_variables)
