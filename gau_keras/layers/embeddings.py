"""Embedding layers: the token embedding with a tied output mode, and
sinusoidal (rotary) position embeddings.

Design notes: docs/models.md.
"""
import keras
from keras import ops

from gau_keras import ops as gops


@keras.saving.register_keras_serializable(package="gau_keras")
class Embedding(keras.layers.Embedding):
    """``keras.layers.Embedding`` with bert4keras's two extras.

    * ``mode='embedding'`` (default): ids [B, L] -> vectors [B, L, E]. With
      ``mask_zero`` the mask is ``ids != 0`` except that position 0 is always
      kept, so that no attention row has every key masked.
    * ``mode='dense'``: hidden states [B, L, E] -> logits [B, L, V] computed as
      ``x @ embeddings.T`` (the MLM head tied to the input embedding).
    """

    def call(self, inputs, mode="embedding"):
        if mode == "embedding":
            return super().call(inputs)
        if mode != "dense":
            raise ValueError(f"Embedding {self.name!r}: mode must be 'embedding' or 'dense', got {mode!r}")
        # in float32 under mixed precision: the logits feed a softmax over the vocab
        x = ops.cast(inputs, "float32")
        return ops.matmul(x, ops.transpose(ops.cast(self.embeddings, "float32")))

    def compute_mask(self, inputs, mask=None):
        if len(inputs.shape) == 2:
            return gops.key_mask_from_token_ids(inputs) if self.mask_zero else None
        return mask

    def compute_output_spec(self, inputs, mode="embedding"):
        if mode == "dense":
            shape = tuple(inputs.shape[:-1]) + (self.input_dim,)
            return keras.KerasTensor(shape, dtype="float32")
        return keras.KerasTensor(tuple(inputs.shape) + (self.output_dim,), dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="gau_keras")
class SinusoidalPositionEmbedding(keras.layers.Layer):
    """Fixed sinusoidal position embeddings, interleaved [sin, cos, ...].

    Input: [B, L, ...] (only its length is used) or, with
    ``custom_position_ids``, ``[x, position_ids [B, L]]``.
    Output by ``merge_mode``: 'add' x + P, 'mul' x * (1 + P), 'concat'
    [x, P], 'zero' P alone ([1, L, d], or [B, L, d] with custom ids) - the
    form RoFormer/GAU-alpha use for rotary attention. No maximum length.
    """

    def __init__(self, output_dim, merge_mode="add", custom_position_ids=False, **kwargs):
        super().__init__(**kwargs)
        if merge_mode not in ("add", "mul", "zero", "concat"):
            raise ValueError(f"SinusoidalPositionEmbedding: unknown merge_mode {merge_mode!r}")
        self.supports_masking = True
        self.output_dim = output_dim
        self.merge_mode = merge_mode
        self.custom_position_ids = custom_position_ids

    def build(self, input_shape):
        self.built = True

    def call(self, inputs):
        if self.custom_position_ids:
            inputs, position_ids = inputs
        else:
            position_ids = ops.arange(ops.shape(inputs)[1], dtype="float32")[None]
        emb = ops.cast(gops.sinusoidal_embeddings(position_ids, self.output_dim), self.compute_dtype)
        if self.merge_mode == "zero":
            return emb
        x = ops.cast(inputs, self.compute_dtype)
        if self.merge_mode == "add":
            return x + emb
        if self.merge_mode == "mul":
            return x * (emb + 1.0)
        emb = ops.broadcast_to(emb, [ops.shape(x)[0], ops.shape(x)[1], self.output_dim])
        return ops.concatenate([x, emb], axis=-1)

    def compute_mask(self, inputs, mask=None):
        if self.custom_position_ids:
            mask = mask[0] if isinstance(mask, (list, tuple)) else mask
        return None if self.merge_mode == "zero" else mask

    def compute_output_shape(self, input_shape):
        if self.custom_position_ids:
            input_shape = input_shape[0]
        if self.merge_mode == "zero":
            batch = input_shape[0] if self.custom_position_ids else 1
            return (batch, input_shape[1], self.output_dim)
        if self.merge_mode == "concat":
            return tuple(input_shape[:-1]) + (input_shape[-1] + self.output_dim,)
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(output_dim=self.output_dim, merge_mode=self.merge_mode,
                      custom_position_ids=self.custom_position_ids)
        return config
