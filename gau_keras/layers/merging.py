"""Merge layers with Keras 2 (bert4keras) mask semantics."""
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="gau_keras")
class Add(keras.layers.Add):
    """``keras.layers.Add`` whose output mask is the AND of the inputs' masks,
    ignoring inputs without a mask (Keras 2's rule, which bert4keras models rely
    on: token embeddings carry the padding mask, segment embeddings none).
    Keras 3's Add drops the mask as soon as one input has none."""

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        masks = [m for m in mask if m is not None]
        if not masks:
            return None
        output = masks[0]
        for m in masks[1:]:
            output = ops.logical_and(output, m)
        return output
