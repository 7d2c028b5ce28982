"""Merge layers with Keras 2 (bert4keras) mask semantics."""

import keras
from keras import ops

from gau_keras.registration import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
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


@keras.saving.register_keras_serializable(package=PACKAGE)
class Concatenate1D(keras.layers.Layer):
    """Concatenates sequences along the time axis: [B, L1, d], [B, L2, d], ...
    -> [B, L1 + L2 + ..., d]. If any input has a mask, the output mask is the
    concatenation of the masks, an all-True mask standing in for an input
    without one (Keras's Concatenate cannot mix masked and unmasked inputs)."""

    def build(self, input_shape):
        self.built = True

    def call(self, inputs):
        return ops.concatenate(list(inputs), axis=1)

    def compute_mask(self, inputs, mask=None):
        if mask is None or all(m is None for m in mask):
            return None
        masks = [
            ops.ones_like(x[..., 0], dtype="bool") if m is None else ops.cast(m, "bool") for x, m in zip(inputs, mask)
        ]
        return ops.concatenate(masks, axis=1)

    def compute_output_shape(self, input_shape):
        lengths = [shape[1] for shape in input_shape]
        length = None if any(n is None for n in lengths) else sum(lengths)
        return (input_shape[0][0], length) + tuple(input_shape[0][2:])
