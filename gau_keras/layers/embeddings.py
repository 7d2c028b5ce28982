"""Embedding layers: the token embedding with a tied output mode, sinusoidal
(rotary) and trainable position embeddings, and bert4keras's relative position
embeddings (Shaw et al.'s and T5's).

Design notes: docs/models.md.
"""

import math

import keras
from keras import ops

from gau_keras import ops as gops
from gau_keras.registration import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
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


@keras.saving.register_keras_serializable(package=PACKAGE)
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
        return self.at_positions(inputs, position_ids)

    def at_positions(self, inputs, position_ids):
        """The layer's output for ``inputs`` [B, L, ...] at the positions ``position_ids``
        [1|B, L] (what cached decoding calls: a few tokens at positions past the first)."""
        emb = ops.cast(gops.sinusoidal_embeddings(position_ids, self.output_dim), self.compute_dtype)
        if self.merge_mode == "zero":
            return emb
        return _merge(ops.cast(inputs, self.compute_dtype), emb, self.merge_mode)

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
        config.update(
            output_dim=self.output_dim, merge_mode=self.merge_mode, custom_position_ids=self.custom_position_ids
        )
        return config


def _merge(x, emb, merge_mode):
    """x [B, L, d'] with position embeddings emb [1|B, L, d] by ``merge_mode``."""
    if merge_mode == "zero":
        return emb
    if merge_mode == "add":
        return x + emb
    if merge_mode == "mul":
        return x * (emb + 1.0)
    emb = ops.broadcast_to(emb, [ops.shape(x)[0], ops.shape(x)[1], ops.shape(emb)[-1]])
    return ops.concatenate([x, emb], axis=-1)


def _merged_shape(input_shape, output_dim, merge_mode):
    if merge_mode == "concat":
        return tuple(input_shape[:2]) + (input_shape[2] + output_dim,)
    return tuple(input_shape[:2]) + (output_dim,)


MERGE_MODES = ("add", "mul", "zero", "concat")


@keras.saving.register_keras_serializable(package=PACKAGE)
class PositionEmbedding(keras.layers.Layer):
    """Trainable absolute position embeddings (BERT's), table ``embeddings``
    [input_dim, output_dim].

    Input: x [B, L, d] (positions 0..L-1, L <= input_dim) or, with
    ``custom_position_ids``, ``[x, position_ids [B, L]]``. Output by
    ``merge_mode`` as SinusoidalPositionEmbedding ('add', 'mul', 'zero',
    'concat'). ``hierarchical`` (True = alpha 0.4, or a float alpha) extends
    the table to input_dim² positions (Su's hierarchical decomposition):
    with u = (E - alpha E[0]) / (1 - alpha), position p gets
    ``alpha u[p // input_dim] + (1 - alpha) u[p % input_dim]``.
    """

    def __init__(
        self,
        input_dim,
        output_dim,
        merge_mode="add",
        hierarchical=None,
        embeddings_initializer="zeros",
        custom_position_ids=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if merge_mode not in MERGE_MODES:
            raise ValueError(f"PositionEmbedding: merge_mode must be one of {MERGE_MODES}, got {merge_mode!r}")
        self.supports_masking = True
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.merge_mode = merge_mode
        self.hierarchical = hierarchical
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.custom_position_ids = custom_position_ids

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.input_dim, self.output_dim), initializer=self.embeddings_initializer
        )

    def call(self, inputs):
        if self.custom_position_ids:
            x, position_ids = inputs
        else:
            x, position_ids = inputs, None
        return self.at_positions(x, position_ids)

    def at_positions(self, x, position_ids=None):
        """``x`` [B, L, d'] merged with the embeddings of ``position_ids`` [1|B, L] (None: 0..L-1):
        ``call``'s computation, which cached decoding calls with positions past the first."""
        if position_ids is not None:
            position_ids = ops.cast(position_ids, "int32")
        table = ops.cast(self.embeddings, self.compute_dtype)
        if self.hierarchical:
            alpha = 0.4 if self.hierarchical is True else self.hierarchical
            if position_ids is None:
                position_ids = ops.arange(ops.shape(x)[1], dtype="int32")[None]
            table = (table - alpha * table[:1]) / (1.0 - alpha)
            emb = alpha * ops.take(table, position_ids // self.input_dim, axis=0) + (1.0 - alpha) * ops.take(
                table, position_ids % self.input_dim, axis=0
            )
        elif position_ids is not None:
            emb = ops.take(table, position_ids, axis=0)
        else:
            emb = table[None, : ops.shape(x)[1]]
        return _merge(ops.cast(x, self.compute_dtype), emb, self.merge_mode)

    def compute_mask(self, inputs, mask=None):
        if self.custom_position_ids and isinstance(mask, (list, tuple)):
            mask = mask[0]
        return None if self.merge_mode == "zero" else mask

    def compute_output_shape(self, input_shape):
        if self.custom_position_ids:
            input_shape = input_shape[0]
        shape = _merged_shape(input_shape, self.output_dim, self.merge_mode)
        if self.merge_mode == "zero" and not self.custom_position_ids:
            shape = (1,) + shape[1:]
        return shape

    def get_config(self):
        config = super().get_config()
        config.update(
            input_dim=self.input_dim,
            output_dim=self.output_dim,
            merge_mode=self.merge_mode,
            hierarchical=self.hierarchical,
            custom_position_ids=self.custom_position_ids,
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
        )
        return config


def _relative_positions(q, v):
    """Key index minus query index, int32 [Lq, Lv]."""
    q_index = ops.arange(ops.shape(q)[1], dtype="int32")[:, None]
    v_index = ops.arange(ops.shape(v)[1], dtype="int32")[None, :]
    return v_index - q_index


@keras.saving.register_keras_serializable(package=PACKAGE)
class RelativePositionEmbedding(keras.layers.Layer):
    """Shaw et al.'s relative position embeddings (NEZHA's 'typical_relative'
    attention bias): inputs ``[q, v]`` [B, Lq, .], [B, Lv, .] -> the table
    row of each clipped offset j - i, [Lq, Lv, output_dim]; the table
    ``embeddings`` [input_dim, output_dim] covers offsets within
    ±(input_dim - 1) // 2. The output mask is q's.
    """

    def __init__(self, input_dim, output_dim, embeddings_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.input_dim, self.output_dim), initializer=self.embeddings_initializer
        )

    def call(self, inputs):
        return ops.take(ops.cast(self.embeddings, self.compute_dtype), self.compute_position_ids(inputs), axis=0)

    def at_positions(self, query_positions, key_positions):
        """The embeddings [Lq, Lv, output_dim] of queries at ``query_positions`` [Lq] and keys at
        ``key_positions`` [Lv] (int): what ``call`` gives for positions 0.., at any positions
        (cached decoding's new tokens)."""
        offsets = ops.cast(key_positions, "int32")[None, :] - ops.cast(query_positions, "int32")[:, None]
        return ops.take(ops.cast(self.embeddings, self.compute_dtype), self.offset_ids(offsets), axis=0)

    def compute_position_ids(self, inputs):
        """Table indices int32 [Lq, Lv] of the offsets."""
        q, v = inputs
        return self.offset_ids(_relative_positions(q, v))

    def offset_ids(self, offsets):
        """Table indices of key-minus-query ``offsets`` (int32, any shape)."""
        max_position = (self.input_dim - 1) // 2
        return ops.clip(offsets, -max_position, max_position) + max_position

    def compute_output_shape(self, input_shape):
        return (input_shape[0][1], input_shape[1][1], self.output_dim)

    def compute_mask(self, inputs, mask=None):
        return mask[0] if isinstance(mask, (list, tuple)) else mask

    def get_config(self):
        config = super().get_config()
        config.update(
            input_dim=self.input_dim,
            output_dim=self.output_dim,
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
        )
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class RelativePositionEmbeddingT5(RelativePositionEmbedding):
    """T5's bucketed relative position bias: offsets j - i fall into
    ``input_dim`` buckets (exact for small distances, log-spaced up to
    ``max_distance``; half the buckets per direction when ``bidirectional``).
    Output [Lq, Lv, output_dim] (output_dim = heads in T5)."""

    def __init__(
        self, input_dim, output_dim, max_distance=128, bidirectional=True, embeddings_initializer="zeros", **kwargs
    ):
        super().__init__(input_dim, output_dim, embeddings_initializer=embeddings_initializer, **kwargs)
        self.max_distance = max_distance
        self.bidirectional = bidirectional

    def offset_ids(self, offsets):
        distance = -offsets  # query index - key index
        buckets = self.input_dim
        offset = 0
        if self.bidirectional:
            buckets //= 2
            offset = ops.cast(ops.less(distance, 0), "int32") * buckets
            distance = ops.abs(distance)
        else:
            distance = ops.maximum(distance, 0)
        exact = buckets // 2
        # log-spaced buckets beyond `exact`; the where below discards the log(0) of small distances
        scaled = ops.log(ops.cast(distance, "float32") / exact) / math.log(self.max_distance / exact)
        large = exact + ops.cast(scaled * (buckets - exact), "int32")
        large = ops.minimum(large, buckets - 1)
        return offset + ops.where(ops.less(distance, exact), distance, large)

    def get_config(self):
        config = super().get_config()
        config.update(max_distance=self.max_distance, bidirectional=self.bidirectional)
        return config
