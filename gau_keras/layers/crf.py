"""Sequence-labelling output layers with learned label transitions: the linear-chain
CRF and the (bidirectional) maximum-entropy Markov model of bert4keras.

Both layers are the identity on the per-token label scores except that padded
positions become ``-inf`` (the layer takes the Keras mask of its input); the
losses and accuracies, used as ``model.compile(loss=crf.sparse_loss,
metrics=[crf.sparse_accuracy])``, recover the padding from those ``-inf``
entries, as bert4keras's do. Losses are computed in float32 whatever the
layer's dtype policy. Decoding is ``gau_keras.snippets.ViterbiDecoder`` with
``trans=keras.ops.convert_to_numpy(crf.trans)``.

On JAX, the MEMM accuracy reads the transition weights where Keras computes the metrics,
which only a model of the bert4keras face maps (``gau_keras.backend.keras.models.Model``,
``build_transformer_model``'s); in a plain ``keras.Model`` it raises an error saying so.

Shapes: scores y_pred [B, L, N] (N labels); sparse labels [B, L] ints,
dense labels [B, L, N] one-hot.
"""

import math

import keras
import numpy as np
from keras import ops

from gau_keras import ops as gops
from gau_keras.registration import PACKAGE


def _scaled_glorot(lr_multiplier):
    """Glorot-uniform divided by ``lr_multiplier``: the stored variable is the
    transition matrix / lr_multiplier, so its effective learning rate is scaled."""
    base = keras.initializers.GlorotUniform()
    return lambda shape, dtype=None: base(shape, dtype=dtype) / lr_multiplier


def _valid_positions(y_pred):
    """bool [B, L]: positions whose scores are not the padding ``-inf``."""
    return ops.all(ops.not_equal(y_pred, -math.inf), axis=2)


def _sparse_labels(y_true, y_pred, owner):
    """(integer labels [B, L], 0 on padding; bool [B]: rows holding a label that is not a whole
    number in [0, N) at a position that is not padding) from whatever shape and dtype Keras hands
    the loss. Such a label is a ValueError
    naming it when the values are at hand (eager); in a traced step the loss of its row is NaN
    (a one-hot of it would be all zeros and give a finite, wrong loss)."""
    length, expected = (y_true.shape[1] if len(y_true.shape) > 1 else None), y_pred.shape[1]
    if isinstance(length, int) and isinstance(expected, int) and length != expected:
        raise ValueError(
            f"{owner}: y_true has {length} positions per sample where the scores (y_pred) have "
            f"{expected}; shapes {tuple(y_true.shape)} and {tuple(y_pred.shape)}"
        )
    values = ops.cast(ops.reshape(y_true, ops.shape(y_pred)[:-1]), "float32")
    num_labels = y_pred.shape[-1]
    bad = ops.logical_or(
        ops.not_equal(values, ops.floor(values)),
        ops.logical_or(ops.less(values, 0.0), ops.greater_equal(values, float(num_labels))),
    )
    # padding (scores -inf) may hold any label, e.g. -1 or -100: bert4keras ignores it there
    valid = _valid_positions(ops.cast(y_pred, "float32"))
    bad = ops.logical_and(bad, valid)
    concrete = gops.concrete(bad)
    if concrete is not None and concrete.any():
        b, t = np.argwhere(concrete)[0]
        raise ValueError(
            f"{owner}: y_true[{b}, {t}] = {float(gops.concrete(values)[b, t])!r} is not a label "
            f"(an integer in [0, {num_labels}))"
        )
    labels = ops.clip(ops.cast(values, "int32"), 0, num_labels - 1)  # in range for one_hot / take
    return ops.where(valid, labels, 0), ops.any(bad, axis=1)


def _masked_mean(values, mask):
    """sum(values * mask) / sum(mask), both [B, L] float32."""
    return ops.sum(values * mask) / ops.sum(mask)


class _TransitionLayer(keras.layers.Layer):
    """Shared parts: the lr-scaled weights, the ``-inf`` masking call and its config."""

    #: read by the bert4keras face's models (``gau_keras.bert4keras.jax_training``): on JAX they map the
    #: step's weights where Keras computes the metrics, which read ``trans``
    _gau_keras_metrics_read_weights = True

    def __init__(self, lr_multiplier=1, **kwargs):
        super().__init__(**kwargs)
        if not lr_multiplier > 0:
            raise ValueError(f"{type(self).__name__}: lr_multiplier must be > 0, got {lr_multiplier!r}")
        self.lr_multiplier = lr_multiplier
        self.supports_masking = True

    def _transition_weight(self, name, shape):
        return self.add_weight(name=name, shape=shape, initializer=_scaled_glorot(self.lr_multiplier))

    def _scaled(self, variable):
        """The effective value of a stored weight, float32."""
        try:
            value = ops.cast(variable, "float32")
        except TypeError as error:  # JAX: Keras left the variable without a value in this scope
            if keras.backend.backend() != "jax":
                raise
            raise RuntimeError(
                f"{self.name}: on JAX a metric of this layer reads its transition weights, which Keras does not "
                "map where a plain keras.Model computes its metrics; build the model with the bert4keras face's "
                "Model (gau_keras.backend.keras.models.Model, or build_transformer_model's), which maps them "
                "(gau_keras.bert4keras.jax_training)"
            ) from error
        return value * self.lr_multiplier if self.lr_multiplier != 1 else value

    def call(self, inputs, mask=None):
        if mask is None:
            return inputs
        keep = ops.expand_dims(ops.cast(mask, "bool"), -1)
        return ops.where(keep, inputs, ops.cast(-math.inf, inputs.dtype))

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return input_shape

    def dense_accuracy(self, y_true, y_pred):
        """Per-token accuracy on valid positions, one-hot ``y_true``."""
        return self.sparse_accuracy(ops.argmax(y_true, axis=2), y_pred)

    def get_config(self):
        config = super().get_config()
        config.update(lr_multiplier=self.lr_multiplier)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ConditionalRandomField(_TransitionLayer):
    """Linear-chain CRF over N labels; its one weight is ``trans`` [N, N]
    (score of label i followed by label j).

    ``lr_multiplier``: the transition matrix learns ``lr_multiplier`` times
    faster than the rest of the model (it is stored divided by it).
    """

    def build(self, input_shape):
        labels = input_shape[-1]
        self._trans = self._transition_weight("trans", (labels, labels))

    @property
    def trans(self):
        """The transition matrix [N, N] (a variable when lr_multiplier is 1)."""
        return self._trans if self.lr_multiplier == 1 else self._trans * self.lr_multiplier

    def target_score(self, y_true, y_pred):
        """Unnormalised log-score [B] of the label path ``y_true`` (one-hot, zero on padding)."""
        trans = self._scaled(self._trans)
        emissions = ops.sum(y_true * y_pred, axis=[1, 2])
        steps = ops.einsum("bni,ij->bnj", y_true[:, :-1], trans)
        return emissions + ops.sum(steps * y_true[:, 1:], axis=[1, 2])

    def log_partition(self, y_pred, mask):
        """log Z [B] by the forward recursion; y_pred [B, L, N] zero on padding,
        mask [B, L] float32. A padded step carries the previous state unchanged."""
        trans = ops.expand_dims(self._scaled(self._trans), 0)  # [1, N, N]

        def step(state, inputs):
            scores, keep = inputs[:, :-1], inputs[:, -1:]  # [B, N], [B, 1]
            new = ops.logsumexp(ops.expand_dims(state, 2) + trans, axis=1) + scores
            state = keep * new + (1.0 - keep) * state
            return state, state

        # one scanned tensor (the mask as an extra column): Keras's TF scan fails on
        # several when the length is unknown at trace time (fit on a generator)
        xs = ops.concatenate([y_pred, ops.expand_dims(mask, 2)], axis=2)[:, 1:]
        final, _ = ops.scan(step, y_pred[:, 0], ops.transpose(xs, [1, 0, 2]))
        return ops.logsumexp(final, axis=1)

    def dense_loss(self, y_true, y_pred):
        """Negative log-likelihood [B] of the one-hot path ``y_true``."""
        y_pred = ops.cast(y_pred, "float32")
        valid = _valid_positions(y_pred)
        keep = ops.expand_dims(valid, 2)
        y_true = ops.where(keep, ops.cast(y_true, "float32"), 0.0)
        y_pred = ops.where(keep, y_pred, 0.0)
        return self.log_partition(y_pred, ops.cast(valid, "float32")) - self.target_score(y_true, y_pred)

    def sparse_loss(self, y_true, y_pred):
        """Negative log-likelihood [B] of the integer label path ``y_true`` (NaN for a row with
        a label outside [0, N) in a traced step; an error when eager)."""
        labels, bad = _sparse_labels(y_true, y_pred, f"{self.name}.sparse_loss")
        loss = self.dense_loss(ops.one_hot(labels, ops.shape(self._trans)[0]), y_pred)
        return ops.where(bad, math.nan, loss)

    def sparse_accuracy(self, y_true, y_pred):
        """Per-token accuracy of argmax(y_pred) (transitions ignored) on valid positions."""
        y_pred = ops.cast(y_pred, "float32")
        mask = ops.cast(_valid_positions(y_pred), "float32")
        labels, _ = _sparse_labels(y_true, y_pred, f"{self.name}.sparse_accuracy")
        hits = ops.cast(ops.equal(labels, ops.cast(ops.argmax(y_pred, axis=2), "int32")), "float32")
        return _masked_mean(hits, mask)


def _reverse_valid(x, lengths):
    """Reverses the first ``lengths[b]`` steps of each row of x [B, L] or [B, L, N]; padding stays last."""
    steps = ops.arange(ops.shape(x)[1], dtype="int32")[None]  # [1, L]
    lengths = ops.cast(lengths, "int32")[:, None]  # [B, 1]
    index = ops.where(steps < lengths, lengths - 1 - steps, steps)  # [B, L]
    if len(x.shape) == 3:
        index = ops.broadcast_to(ops.expand_dims(index, 2), ops.shape(x))
    return ops.take_along_axis(x, index, axis=1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaximumEntropyMarkovModel(_TransitionLayer):
    """Bidirectional MEMM: each token's label distribution is the softmax of
    (its score + the transition score from the previous label) / 2, trained
    left-to-right and right-to-left (cheaper than a CRF, same use).

    Weights: ``trans`` [N, N], or with ``hidden_dim`` the low-rank factors
    ``l_trans``, ``r_trans`` [N, hidden_dim] (trans = l_trans r_transᵀ).
    """

    def __init__(self, lr_multiplier=1, hidden_dim=None, **kwargs):
        super().__init__(lr_multiplier, **kwargs)
        self.hidden_dim = hidden_dim

    def build(self, input_shape):
        labels = input_shape[-1]
        if self.hidden_dim is None:
            self._trans = self._transition_weight("trans", (labels, labels))
        else:
            self._l_trans = self._transition_weight("l_trans", (labels, self.hidden_dim))
            self._r_trans = self._transition_weight("r_trans", (labels, self.hidden_dim))

    def _effective(self, name):
        variable = getattr(self, name)
        return variable if self.lr_multiplier == 1 else variable * self.lr_multiplier

    @property
    def trans(self):
        """The transition matrix [N, N] (only without ``hidden_dim``)."""
        return self._effective("_trans")

    @property
    def l_trans(self):
        return self._effective("_l_trans")

    @property
    def r_trans(self):
        return self._effective("_r_trans")

    def _history(self, labels, go_backwards):
        """Transition scores [B, L, N] from each token's label to the next token's."""
        if self.hidden_dim is None:
            trans = self._scaled(self._trans)
            return ops.take(ops.transpose(trans) if go_backwards else trans, labels, axis=0)
        left, right = self._scaled(self._l_trans), self._scaled(self._r_trans)
        if go_backwards:
            left, right = right, left
        return ops.einsum("bnd,kd->bnk", ops.take(left, labels, axis=0), right)

    def _scores(self, y_true, y_pred, go_backwards):
        """(labels [B, L], mixed scores [B, L, N], valid and mask [B, L], rows with a bad label [B])
        in one direction."""
        y_pred = ops.cast(y_pred, "float32")
        valid = _valid_positions(y_pred)
        mask = ops.cast(valid, "float32")
        labels, bad = _sparse_labels(y_true, y_pred, self.name)
        if go_backwards:
            lengths = ops.sum(ops.cast(valid, "int32"), axis=1)
            labels, y_pred = _reverse_valid(labels, lengths), _reverse_valid(y_pred, lengths)
        history = self._history(labels, go_backwards)
        # the first token has no predecessor: its own score stands in for the transition
        history = ops.concatenate([y_pred[:, :1], history[:, :-1]], axis=1)
        return labels, (y_pred + history) / 2.0, valid, mask, bad

    def basic_loss(self, y_true, y_pred, go_backwards=False):
        labels, mixed, valid, mask, bad = self._scores(y_true, y_pred, go_backwards)
        mixed = ops.where(ops.expand_dims(valid, 2), mixed, 0.0)
        losses = keras.losses.sparse_categorical_crossentropy(labels, mixed, from_logits=True)
        return ops.where(ops.any(bad), math.nan, _masked_mean(losses, mask))

    def sparse_loss(self, y_true, y_pred):
        """Mean of the forward and backward token cross-entropies (a scalar)."""
        return (self.basic_loss(y_true, y_pred, False) + self.basic_loss(y_true, y_pred, True)) / 2.0

    def dense_loss(self, y_true, y_pred):
        return self.sparse_loss(ops.argmax(y_true, axis=2), y_pred)

    def basic_accuracy(self, y_true, y_pred, go_backwards=False):
        labels, mixed, _, mask, _ = self._scores(y_true, y_pred, go_backwards)
        hits = ops.cast(ops.equal(labels, ops.cast(ops.argmax(mixed, axis=2), "int32")), "float32")
        return _masked_mean(hits, mask)

    def sparse_accuracy(self, y_true, y_pred):
        """Mean of the forward and backward per-token accuracies on valid positions."""
        return (self.basic_accuracy(y_true, y_pred, False) + self.basic_accuracy(y_true, y_pred, True)) / 2.0

    def get_config(self):
        config = super().get_config()
        config.update(hidden_dim=self.hidden_dim)
        return config
