"""Masked global max pooling over time (bert4keras's replacement of Keras's)."""

import keras
from keras import ops

from gau_keras.registration import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class GlobalMaxPooling1D(keras.layers.GlobalMaxPooling1D):
    """``keras.layers.GlobalMaxPooling1D`` that skips masked steps: x [B, L, d]
    (channels_last) or [B, d, L] with mask [B, L] -> [B, d]. Keras 3's own
    layer ignores the mask (Keras 3's GlobalAveragePooling1D already honours
    it, so bert4keras's second replacement is not needed)."""

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        super().__init__(data_format=data_format, keepdims=keepdims, **kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        axis = 1 if self.data_format == "channels_last" else 2
        if mask is not None:
            keep = ops.expand_dims(ops.cast(mask, "bool"), 2 if axis == 1 else 1)
            inputs = ops.where(keep, inputs, ops.cast(float("-inf"), inputs.dtype))
        return ops.max(inputs, axis=axis, keepdims=self.keepdims)

    def compute_mask(self, inputs, mask=None):
        return None
