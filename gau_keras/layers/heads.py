"""Task heads on top of an encoder's hidden states [B, L, H] (CLUE fine-tuning).

Every head outputs logits; ``gau_keras.losses`` has the matching losses
(``sparse_logits_crossentropy`` for all but GlobalPointer):

* `classification_head`: [CLS] vector -> dropout -> Dense -> [B, num_labels];
* `span_head`: Dense(2) per token -> [B, 2, L] start/end logits (padding NEG_INF);
* `multiple_choice_model`: each of C choice sequences [B, C, L] through the
  encoder, [CLS] -> Dense(1) -> [B, C] (absent choices NEG_INF);
* `candidate_scoring_model`: the MLM head at the [MASK] positions -> mean
  log-probability of each candidate's tokens -> [B, C];
* `global_pointer_head`: `gau_keras.layers.GlobalPointer` -> [B, T, L, L]
  with `gau_keras.losses.global_pointer_crossentropy`.

Their new kernels start from `gau_keras.initializers.Portable` draws of
glorot_uniform, seeded from numpy's global generator: one
``keras.utils.set_random_seed`` gives the same heads on TensorFlow and JAX.
"""

import keras
from keras import ops

from gau_keras.initializers import Portable
from gau_keras.layers.global_pointer import GlobalPointer
from gau_keras.ops import masked_fill
from gau_keras.registration import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class FirstToken(keras.layers.Layer):
    """The vector at position 0 ([CLS]): [B, L, H] -> [B, H]."""

    def call(self, inputs):
        return inputs[:, 0]

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])


@keras.saving.register_keras_serializable(package=PACKAGE)
class SpanLogits(keras.layers.Layer):
    """[logits [B, L, 2], token_ids [B, L]] -> start/end logits [B, 2, L].

    Padded positions (token id 0) get NEG_INF, so neither softmax nor argmax
    can pick them.
    """

    def call(self, inputs):
        logits, token_ids = inputs
        logits = ops.transpose(logits, (0, 2, 1))
        real = ops.not_equal(token_ids, 0)[:, None, :]
        return masked_fill(logits, real)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        logits_shape = input_shape[0]
        return (logits_shape[0], logits_shape[2], logits_shape[1])


@keras.saving.register_keras_serializable(package=PACKAGE)
class FlattenChoices(keras.layers.Layer):
    """[B, C, L] -> [B * C, L]: every choice becomes its own sequence."""

    def call(self, inputs):
        shape = ops.shape(inputs)
        return ops.reshape(inputs, (shape[0] * shape[1], shape[2]))

    def compute_output_shape(self, input_shape):
        batch = None if None in input_shape[:2] else input_shape[0] * input_shape[1]
        return (batch, input_shape[2])


@keras.saving.register_keras_serializable(package=PACKAGE)
class ChoiceLogits(keras.layers.Layer):
    """[scores [B * C, 1], token_ids [B, C, L]] -> choice logits [B, C].

    A choice whose sequence is all padding (token_ids[b, c, 0] == 0: fewer
    choices than the batch's widest question) gets NEG_INF.
    """

    def call(self, inputs):
        scores, token_ids = inputs
        present = ops.not_equal(token_ids[:, :, 0], 0)
        scores = ops.reshape(scores, ops.shape(present))
        return masked_fill(scores, present)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[1][:2])


@keras.saving.register_keras_serializable(package=PACKAGE)
class GatherPositions(keras.layers.Layer):
    """[hidden [B, L, H], positions [B, M]] -> the vectors at those positions [B, M, H]."""

    def call(self, inputs):
        hidden, positions = inputs
        return ops.take_along_axis(hidden, ops.cast(positions, "int32")[:, :, None], axis=1)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0][0], input_shape[1][1], input_shape[0][2])


@keras.saving.register_keras_serializable(package=PACKAGE)
class CandidateScores(keras.layers.Layer):
    """[MLM logits [B, M, V], candidate_ids [B, C, M]] -> candidate scores [B, C].

    The score of candidate c is the mean over its tokens m (ids != 0) of
    log p(candidate_ids[b, c, m] at mask m). A candidate with no token gets
    NEG_INF.
    """

    def call(self, inputs):
        logits, candidate_ids = inputs
        log_probs = ops.log_softmax(logits, axis=-1)  # [B, M, V]
        candidate_ids = ops.cast(candidate_ids, "int32")
        index = ops.transpose(candidate_ids, (0, 2, 1))  # [B, M, C]
        picked = ops.transpose(ops.take_along_axis(log_probs, index, axis=2), (0, 2, 1))  # [B, C, M]
        used = ops.cast(ops.not_equal(candidate_ids, 0), picked.dtype)
        count = ops.sum(used, axis=-1)
        mean = ops.sum(picked * used, axis=-1) / ops.maximum(count, 1.0)
        return masked_fill(mean, count > 0)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[1][:2])


def classification_head(hidden, num_labels, dropout_rate=0.1, name="classifier"):
    """[CLS] vector of hidden [B, L, H] -> logits [B, num_labels]."""
    x = FirstToken(name=f"{name}-cls")(hidden)
    x = keras.layers.Dropout(dropout_rate, name=f"{name}-dropout")(x)
    return keras.layers.Dense(num_labels, kernel_initializer=Portable("glorot_uniform"), name=f"{name}-dense")(x)


def span_head(hidden, token_ids, name="span"):
    """hidden [B, L, H] -> start/end logits [B, 2, L] (padding masked)."""
    logits = keras.layers.Dense(2, kernel_initializer=Portable("glorot_uniform"), name=f"{name}-dense")(hidden)
    return SpanLogits(name=f"{name}-logits")([logits, token_ids])


def global_pointer_head(hidden, token_ids, num_types, head_size=64, name="global-pointer"):
    """hidden [B, L, H] -> span logits [B, num_types, L, L] (padding and end < start masked)."""
    mask = ops.not_equal(token_ids, 0)
    # glorot_uniform, not bert4keras's lecun_normal default: the recorded CLUE runs started from it
    return GlobalPointer(num_types, head_size, kernel_initializer=Portable("glorot_uniform"), name=name)(
        hidden, mask=mask
    )


def multiple_choice_model(encoder, dropout_rate=0.1, name="multiple_choice"):
    """A keras.Model: [token_ids, segment_ids] [B, C, L] -> choice logits [B, C].

    `encoder` maps [token_ids, segment_ids] [N, L] to hidden states [N, L, H];
    each choice sequence is encoded on its own and scored from its [CLS] vector.
    """
    token_ids = keras.Input((None, None), dtype="int32", name="choice-token-ids")
    segment_ids = keras.Input((None, None), dtype="int32", name="choice-segment-ids")
    flat_tokens = FlattenChoices(name="flatten-tokens")(token_ids)
    flat_segments = FlattenChoices(name="flatten-segments")(segment_ids)
    hidden = encoder([flat_tokens, flat_segments])
    scores = classification_head(hidden, 1, dropout_rate, name="choice")
    logits = ChoiceLogits(name="choice-logits")([scores, token_ids])
    return keras.Model([token_ids, segment_ids], logits, name=name)


def candidate_scoring_model(transformer, name="candidate_scoring"):
    """A keras.Model: [token_ids, segment_ids [B, L], mask positions [B, M],
    candidate_ids [B, C, M]] -> candidate logits [B, C].

    `transformer` is the builder object of a model built with an MLM head
    (``return_keras_model=False, with_mlm=...``): its tied MLM head
    (`Transformer.mlm_logits`) is applied to the hidden states at the M
    [MASK] positions only, not to all L positions.
    """
    if "Embedding-Token" not in transformer.layers or not transformer.with_mlm:
        raise ValueError("candidate_scoring_model: the transformer must be built with with_mlm")
    token_ids, segment_ids = transformer.model.inputs
    positions = keras.Input((None,), dtype="int32", name="mask-positions")
    candidate_ids = keras.Input((None, None), dtype="int32", name="candidate-ids")
    hidden = GatherPositions(name="gather-masks")([transformer.encoder_output, positions])
    logits = transformer.mlm_logits(hidden)
    scores = CandidateScores(name="candidate-scores")([logits, candidate_ids])
    return keras.Model([token_ids, segment_ids, positions, candidate_ids], scores, name=name)
