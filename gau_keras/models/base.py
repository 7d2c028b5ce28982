"""The bert4keras-style Transformer base: layer reuse by name, the build
sequence, attention-bias applications and name-based checkpoint mapping.

Design notes: docs/models.md and docs/architecture.md (Extension points).
"""
import logging

import keras
import numpy as np

from gau_keras import checkpoints
from gau_keras.initializers import ScaledTruncatedNormal
from gau_keras.layers import AttentionBias, Embedding, SinusoidalPositionEmbedding
from gau_keras.layers.recompute import default_recompute

logger = logging.getLogger(__name__)

APPLICATIONS = ("encoder", "lm", "unilm")


class Transformer:
    """Base class: subclasses define ``get_inputs``, ``apply_embeddings``,
    ``apply_main_layers``, ``apply_final_layers`` and ``variable_mapping``.

    ``variable_mapping()`` returns ``{layer_name: {weight_attr: ckpt_name}}``
    where ``weight_attr`` is an attribute path on the layer (e.g.
    ``'i_dense.kernel'``), so loading never depends on weight order. A
    bert4keras-style list of checkpoint names is also accepted (matched to
    ``layer.trainable_weights`` in order).
    """

    #: exponent of the depth factor of the initializer (2: RoFormerV2, 3: GAU-alpha)
    initializer_order = 2
    #: the attention normalisation when the config names none
    default_normalization = "softmax"

    def __init__(self, vocab_size, hidden_size, num_hidden_layers, num_attention_heads=1,
                 intermediate_size=None, hidden_act="relu", dropout_rate=None,
                 attention_dropout_rate=None, embedding_size=None, attention_head_size=None,
                 attention_key_size=None, sequence_length=None, keep_tokens=None,
                 compound_tokens=None, segment_vocab_size=2, max_position=512,
                 layer_norm_epsilon=None, softmax_plus_min_len=16, normalization=None, recompute=None,
                 with_mlm=False,
                 application="encoder", ignore_invalid_weights=False, layers=None,
                 prefix=None, name=None):
        if keep_tokens is not None:
            vocab_size = len(keep_tokens)
        if compound_tokens is not None:
            vocab_size += len(compound_tokens)
        if application not in APPLICATIONS:
            raise ValueError(f"application must be one of {APPLICATIONS}, got {application!r}")
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = attention_head_size or hidden_size // num_attention_heads
        self.attention_key_size = attention_key_size or self.attention_head_size
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.dropout_rate = dropout_rate or 0.0
        self.attention_dropout_rate = attention_dropout_rate or 0.0
        self.embedding_size = embedding_size or hidden_size
        self.sequence_length = sequence_length
        self.keep_tokens = keep_tokens
        self.compound_tokens = compound_tokens
        self.segment_vocab_size = segment_vocab_size
        self.max_position = max_position
        self.layer_norm_epsilon = layer_norm_epsilon
        self.softmax_plus_min_len = softmax_plus_min_len
        self.normalization = normalization or self.default_normalization
        # bert4keras's RECOMPUTE: the attention/FFN layers recompute their forward in the backward pass
        self.recompute = default_recompute() if recompute is None else bool(recompute)
        self.application = application
        # bert4keras: LM and UniLM models always have the MLM head
        self.with_mlm = with_mlm or application in ("lm", "unilm")
        self.ignore_invalid_weights = ignore_invalid_weights
        self.layers = {} if layers is None else layers
        self.prefix = prefix or ""
        self.name = name
        self.attention_bias = None
        self.position_bias = None
        self.inputs = None
        self.model = None
        self.encoder_output = None
        self.built = False

    # ------------------------------------------------------------------ build
    def build(self):
        """Creates ``self.model`` (a ``keras.Model``) once."""
        if self.built:
            return self.model
        self.inputs = self.get_inputs()
        outputs = self.call(self.inputs)
        self.model = keras.Model(self.inputs, outputs, name=self.name)
        self.built = True
        return self.model

    def call(self, inputs):
        x = self.apply_embeddings(inputs)
        for index in range(self.num_hidden_layers):
            x = self.apply_main_layers(x, index)
        self.encoder_output = x     # the hidden states before any head
        return self.apply_final_layers(x)

    def prefixed(self, name):
        return None if name is None else self.prefix + name

    def apply(self, inputs=None, layer=None, arguments=None, **kwargs):
        """Calls the layer named ``kwargs['name']``, creating it on first use.

        A Dropout with rate 0 is skipped, as in bert4keras.
        """
        if layer is keras.layers.Dropout and not kwargs.get("rate"):
            return inputs
        name = self.prefixed(kwargs.get("name"))
        kwargs["name"] = name
        if name not in self.layers:
            instance = layer(**kwargs)
            self.layers[instance.name] = instance
            name = instance.name
        if inputs is None:
            return self.layers[name]
        return self.layers[name](inputs, **(arguments or {}))

    @property
    def initializer(self):
        return ScaledTruncatedNormal(self.num_hidden_layers, order=self.initializer_order)

    def apply_mlm_head(self, x, width):
        """The tied MLM head on hidden states of ``width``: (Output-Mapping when
        width != embedding_size) -> Output-MLM-Dropout -> Embedding-Token
        (dense) -> Output-MLM-Activation."""
        if self.embedding_size != width:
            x = self.apply(x, keras.layers.Dense, units=self.embedding_size, use_bias=False,
                           kernel_initializer=self.initializer, name="Output-Mapping")
        x = self.apply(x, keras.layers.Dropout, rate=self.dropout_rate, name="Output-MLM-Dropout")
        x = self.apply(x, Embedding, arguments={"mode": "dense"}, name="Embedding-Token")
        activation = "softmax" if self.with_mlm is True else self.with_mlm
        # float32 under mixed precision: a softmax over the vocab in float16 is off by ~1e-2
        return self.apply(x, keras.layers.Activation, activation=activation, dtype="float32",
                          name="Output-MLM-Activation")

    # ------------------------------------------------------------- biases
    def compute_attention_bias(self, inputs=None):
        """The additive attention bias of the application ([1|B, L, L]) or None."""
        if self.application == "encoder" or self.attention_bias is not None:
            return self.attention_bias
        if self.application == "lm":
            self.attention_bias = self.apply(self.inputs[0], AttentionBias, mode="lm",
                                             name="Attention-Mask")
        else:
            if len(self.inputs) < 2:
                raise ValueError("application='unilm' needs segment ids: segment_vocab_size must be > 0")
            self.attention_bias = self.apply(self.inputs[1], AttentionBias, mode="unilm",
                                             name="Attention-UniLM-Mask")
        return self.attention_bias

    def compute_position_bias(self, inputs=None):
        """Rotary sinusoidal embeddings [1, L, attention_key_size], built once."""
        if self.position_bias is None:
            self.position_bias = self.apply(inputs, SinusoidalPositionEmbedding,
                                            output_dim=self.attention_key_size, merge_mode="zero",
                                            name="Embedding-Rotary-Position")
        return self.position_bias

    # -------------------------------------------------------- checkpoints
    def variable_mapping(self):
        return {}

    def load_embeddings(self, embeddings, where="the checkpoint"):
        """Applies ``keep_tokens`` then ``compound_tokens`` to a [V, E] matrix."""
        if self.keep_tokens is not None:
            embeddings = embeddings[_checked_ids(self.keep_tokens, len(embeddings), "keep_tokens", where)]
        if self.compound_tokens is not None:
            extra = []
            for item in self.compound_tokens:
                ids, weights = (item, [1.0] * len(item)) if isinstance(item, list) else item
                ids = _checked_ids(ids, len(embeddings), "compound_tokens", where)
                extra.append(np.average(embeddings[ids], axis=0, weights=weights))
            embeddings = np.concatenate([embeddings, np.asarray(extra, embeddings.dtype)], axis=0)
        return embeddings

    def embedding_variable_names(self):
        """Checkpoint variables that hold vocab rows (keep/compound tokens apply)."""
        return {"bert/embeddings/word_embeddings"}

    def _weight_pairs(self, mapping):
        """Yields (layer_name, weight, ckpt_name) for the layers this model has."""
        for layer_name, variables in mapping.items():
            layer = self.layers.get(self.prefixed(layer_name))
            if layer is None:
                continue
            if isinstance(variables, dict):
                for attr, ckpt_name in variables.items():
                    yield layer_name, _resolve_attr(layer, attr, layer_name), ckpt_name
            else:
                for weight, ckpt_name in zip(layer.trainable_weights, variables):
                    yield layer_name, weight, ckpt_name

    def load_weights_from_checkpoint(self, checkpoint, mapping=None):
        """Loads weights by checkpoint variable name (see ``variable_mapping``)."""
        reader = checkpoints.CheckpointReader(checkpoint)
        assignments = []
        for layer_name, weight, ckpt_name in self._weight_pairs(mapping or self.variable_mapping()):
            expected = tuple(weight.shape)
            if ckpt_name not in reader:
                message = (f"layer {layer_name!r} (weight {weight.path}, shape {expected}): checkpoint "
                           f"variable {ckpt_name!r} is missing from {reader.path!r}")
                if self.ignore_invalid_weights:
                    logger.warning("%s; ignored (ignore_invalid_weights=True)", message)
                    continue
                raise checkpoints.CheckpointError(message)
            value = reader.get(ckpt_name)
            if ckpt_name in self.embedding_variable_names():
                value = self.load_embeddings(value, f"{ckpt_name!r} of {reader.path!r}")
            if tuple(value.shape) != expected:
                message = (f"layer {layer_name!r} (weight {weight.path}) has shape {expected} but checkpoint "
                           f"variable {ckpt_name!r} in {reader.path!r} has shape {tuple(value.shape)}")
                if self.ignore_invalid_weights:
                    logger.warning("%s; ignored (ignore_invalid_weights=True)", message)
                    continue
                raise checkpoints.CheckpointError(message)
            assignments.append((weight, value))
        for weight, value in assignments:
            weight.assign(value)
        return len(assignments)

    def save_weights_as_checkpoint(self, filename, mapping=None, dtype=None):
        """Writes the mapped weights as a TF1 checkpoint with the original names."""
        values = {ckpt_name: keras.ops.convert_to_numpy(weight.value)
                  for _, weight, ckpt_name in self._weight_pairs(mapping or self.variable_mapping())}
        return checkpoints.save_checkpoint(filename, values, dtype=dtype)


def _checked_ids(ids, rows, argument, where):
    """``ids`` as an int array, every one a row of an embedding matrix of ``rows`` rows."""
    array = np.asarray(ids)
    if array.size and (array.dtype.kind not in "iu" or array.min() < 0 or array.max() >= rows):
        bad = [i for i in np.ravel(array).tolist() if not isinstance(i, int) or not 0 <= i < rows][:5]
        raise checkpoints.CheckpointError(f"{argument}: id(s) {bad} are not rows of {where}, which has "
                                          f"{rows} rows (ids 0..{rows - 1})")
    return array


def _resolve_attr(layer, attr, layer_name):
    obj = layer
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise checkpoints.CheckpointError(
                f"variable_mapping: layer {layer_name!r} ({type(layer).__name__}) has no weight {attr!r}")
        obj = getattr(obj, part)
    return obj
