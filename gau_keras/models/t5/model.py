"""T5 as bert4keras 0.11.5 builds it: the encoder, the decoder and the encoder-decoder, for the
versions t5.1.0 (ReLU feed-forward, output tied to the token table), t5.1.1 and mt5.1.1 (the
gated feed-forward of ``hidden_act=["gelu", "linear"]``, an untied output kernel).

Pre-norm blocks with T5's norm (an RMS norm with a learned scale, no mean subtracted, no offset,
epsilon 1e-6), no biases, unscaled attention scores plus T5's bucketed relative position bias
(bidirectional in the encoder, causal in the decoder), the decoder causal and attending to the
encoder output ("context"). Design notes: docs/models.md (T5).
"""

import keras
from keras import ops

from gau_keras.layers import (
    Add,
    AttentionBias,
    Embedding,
    FeedForward,
    LayerNormalization,
    MultiHeadAttention,
    RelativePositionEmbeddingT5,
    ScaleOffset,
)
from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.base import Transformer
from gau_keras.models.registry import register
from gau_keras.models.t5.checkpoint import LOGITS, SHARED_EMBEDDING, checkpoint_version, relative_bias_name, t5_names

#: bert4keras's T5 versions: the released checkpoint layouts
VERSIONS = ("t5.1.0", "t5.1.1", "mt5.1.1")
#: T5's relative position buckets (bert4keras fixes 32, and T5's max_distance 128)
RELATIVE_BUCKETS = 32


class T5_Base(Transformer):
    """What the T5 classes share: ``version`` (one of ``VERSIONS``; bert4keras's model names
    set it: 't5.1.1' -> version='t5.1.1'), the norm, the blocks' parts and the checkpoint
    names. Only ``application='encoder'`` (the decoder is causal by itself)."""

    takes_segment_ids = False
    has_mlm_head = False
    #: whether it is the whole encoder-decoder (``T5``), not one half
    is_seq2seq = False
    #: bert4keras's T5 initializer: truncated normal scaled by the depth, as its other models
    initializer_order = 2
    # bert4keras attributes, set per built graph (not the base class's per-input caches)
    attention_bias = None
    position_bias = None

    def __init__(self, version="t5.1.0", **kwargs):
        if version not in VERSIONS:
            raise ValueError(f"{type(self).__name__}: version must be one of {VERSIONS}, got {version!r}")
        super().__init__(**kwargs)
        if self.application != "encoder":
            raise ValueError(
                f"{type(self).__name__} cannot be used as application={self.application!r}: "
                f"T5's decoder is causal by itself and its encoder bidirectional (as in bert4keras)"
            )
        self.version = version
        self.layer_norm_epsilon = self.layer_norm_epsilon or 1e-6

    def t5_norm(self, x, name):
        """T5's layer norm: x / sqrt(mean(x²) + eps) * scale (no mean subtracted, no offset)."""
        return self.apply(
            x, LayerNormalization, zero_mean=False, offset=False, epsilon=self.layer_norm_epsilon, name=name
        )

    def token_embedding(self, ids, stack):
        """Embedding-Token (shared by the encoder and decoder of a T5) -> dropout -> the
        mapping to hidden_size when embedding_size differs (as bert4keras: a Dense with bias)."""
        x = self.embed_tokens(ids)
        x = self.apply(x, keras.layers.Dropout, rate=self.dropout_rate, name=f"{stack}-Embedding-Dropout")
        if self.embedding_size != self.hidden_size:
            x = self.apply(
                x,
                keras.layers.Dense,
                units=self.hidden_size,
                kernel_initializer=self.initializer,
                name=f"{stack}-Embedding-Mapping",
            )
        return x

    def relative_position(self, inputs, stack, bidirectional):
        """T5's bias [Lq, Lk, heads] of the query and key tensors ``inputs``."""
        return self.apply(
            inputs,
            RelativePositionEmbeddingT5,
            input_dim=RELATIVE_BUCKETS,
            output_dim=self.num_attention_heads,
            bidirectional=bidirectional,
            embeddings_initializer=self.initializer,
            name=f"{stack}-Embedding-Relative-Position",
        )

    def sublayer(self, x, name, layer, inputs, arguments=None, **options):
        """Pre-norm residual: x + dropout(layer(norm(x), ...)); ``inputs(normed)`` gives the
        layer's inputs."""
        y = self.t5_norm(x, f"{name}-Norm")
        y = self.apply(inputs(y), layer, arguments=arguments, name=name, **options)
        y = self.apply(y, keras.layers.Dropout, rate=self.dropout_rate, name=f"{name}-Dropout")
        return self.apply([x, y], Add, name=f"{name}-Add")

    def attention(self, x, name, inputs, arguments):
        return self.sublayer(
            x,
            name,
            MultiHeadAttention,
            inputs,
            arguments,
            heads=self.num_attention_heads,
            head_size=self.attention_head_size,
            out_dim=self.hidden_size,
            key_size=self.attention_key_size,
            use_bias=False,
            attention_scale=False,
            normalization=self.normalization,
            attention_dropout=self.attention_dropout_rate,
            softmax_plus_min_len=self.softmax_plus_min_len,
            recompute=self.recompute,
            kernel_initializer=self.initializer,
        )

    def feed_forward(self, x, name):
        return self.sublayer(
            x,
            name,
            FeedForward,
            lambda y: y,
            units=self.intermediate_size,
            activation=self.hidden_act,
            use_bias=False,
            recompute=self.recompute,
            kernel_initializer=self.initializer,
        )

    def final_norm(self, x, stack):
        x = self.t5_norm(x, f"{stack}-Output-Norm")
        return self.apply(x, keras.layers.Dropout, rate=self.dropout_rate, name=f"{stack}-Output-Dropout")

    # ------------------------------------------------------------ checkpoint
    def variable_mapping(self):
        return t5_names(self.num_hidden_layers, self.version)

    def embedding_variable_names(self):
        return {SHARED_EMBEDDING}

    def vocab_column_variable_names(self):
        return {LOGITS}

    def transposed_variable_names(self):
        # the checkpoints store the relative position tables [heads, buckets]
        return {relative_bias_name("encoder"), relative_bias_name("decoder")}

    def optional_variables(self):
        return set()

    #: what the class adds to a version to make its bert4keras model name ('mt5.1.1' + '_encoder')
    name_suffix = ""

    def checkpoint_hint(self, reader):
        """The base class's hint, or, for a T5 checkpoint of another version, the model name of
        that version (all versions are one class, so the base class cannot tell them apart)."""
        hint = super().checkpoint_hint(reader)
        version = checkpoint_version(reader.shapes)
        if hint or version in (None, self.version):
            return hint
        name = ("t5" if version == "t5.1.0" else version) + self.name_suffix
        return (
            f" (the checkpoint has the layout of {version}, this model is {self.version}: load it with model={name!r})"
        )


@register("t5.1.1_encoder", arguments={"version": "t5.1.1"})
@register("mt5.1.1_encoder", arguments={"version": "mt5.1.1"})
@register("t5_encoder", "t5.1.0_encoder")
class T5_Encoder(T5_Base):
    """T5's encoder. Input ``Encoder-Input-Token`` [B, L] ids (0 = padding); output the hidden
    states [B, L, H] after ``Encoder-Output-Norm``."""

    name_suffix = "_encoder"

    def get_inputs(self):
        return self.input_layer("Encoder-Input-Token")

    def apply_embeddings(self, inputs):
        x = self.token_embedding(inputs[0] if isinstance(inputs, list) else inputs, "Encoder")
        self.position_bias = self.relative_position([x, x], "Encoder", bidirectional=True)
        return x

    def apply_main_layers(self, x, index):
        name = f"Encoder-Transformer-{index}-"
        position = self.position_bias
        x = self.attention(x, name + "MultiHeadSelfAttention", lambda y: [y, y, y, position], {"p_bias": "t5_relative"})
        return self.feed_forward(x, name + "FeedForward")

    def apply_final_layers(self, x):
        return self.final_norm(x, "Encoder")

    def compute_position_bias(self, inputs=None):
        """The relative position bias of the graph built last (bert4keras's method)."""
        return self.position_bias


@register("t5.1.1_decoder", arguments={"version": "t5.1.1"})
@register("mt5.1.1_decoder", arguments={"version": "mt5.1.1"})
@register("t5_decoder", "t5.1.0_decoder")
class T5_Decoder(T5_Base):
    """T5's decoder. Inputs ``Input-Context`` [B, Lc, H] (the encoder output; bert4keras's
    name) and ``Decoder-Input-Token`` [B, L] ids. Output: with ``with_lm`` (default) the
    probabilities [B, L, V] (``'linear'``: logits; another name: that activation), else the
    scaled hidden states [B, L, H]. ``cross_position_bias``: the cross-attention gets T5's
    (causal) relative bias too, as in bert4keras (the released T5 has none there)."""

    name_suffix = "_decoder"

    def __init__(self, with_lm=True, cross_position_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.with_lm = with_lm
        self.cross_position_bias = cross_position_bias

    def get_inputs(self):
        context = keras.Input(
            shape=(self.sequence_length, self.hidden_size),
            dtype=keras.config.floatx(),
            name=self.prefixed("Input-Context"),
        )
        return [context, self.input_layer("Decoder-Input-Token")]

    def apply_embeddings(self, inputs):
        c, ids = inputs
        x = self.token_embedding(ids, "Decoder")
        self.attention_bias = self.apply(ids, AttentionBias, mode="lm", name="Attention-LM-Mask")
        self.position_bias = (
            self.relative_position([x, x], "Decoder", bidirectional=False),
            self.relative_position([x, c], "Decoder", bidirectional=False),
        )
        return [c, x]

    def apply_main_layers(self, inputs, index):
        c, x = inputs
        name = f"Decoder-Transformer-{index}-"
        mask, position, cross_position = self.attention_bias, *self.position_bias
        x = self.attention(
            x,
            name + "MultiHeadSelfAttention",
            lambda y: [y, y, y, mask, position],
            {"a_bias": True, "p_bias": "t5_relative"},
        )
        if self.cross_position_bias:
            cross, arguments = (lambda y: [y, c, c, cross_position]), {"p_bias": "t5_relative"}
        else:
            cross, arguments = (lambda y: [y, c, c]), {}
        x = self.attention(x, name + "MultiHeadCrossAttention", cross, arguments)
        return [c, self.feed_forward(x, name + "FeedForward")]

    def apply_final_layers(self, inputs):
        _, x = inputs
        x = self.final_norm(x, "Decoder")
        # bert4keras scales by hidden_size**-0.5 whatever the version (Mesh TF: only the tied head)
        x = self.apply(x, ScaleOffset, scale=self.hidden_size**-0.5, offset=False, name="Decoder-Output-Scale")
        self.encoder_output = x
        if not self.with_lm:
            return x
        if self.embedding_size != self.hidden_size:
            x = self.apply(
                x,
                keras.layers.Dense,
                units=self.embedding_size,
                kernel_initializer=self.initializer,
                name="Decoder-Output-Mapping",
            )
        activation = "softmax" if self.with_lm is True else self.with_lm
        if self.version == "t5.1.0":  # tied: the token table's transpose
            x = self.apply(x, Embedding, arguments={"mode": "dense"}, name="Embedding-Token")
            return self.apply(
                x, keras.layers.Activation, activation=activation, dtype="float32", name="Decoder-Output-LM-Activation"
            )
        return self.apply(
            x,
            keras.layers.Dense,
            units=self.vocab_size,
            activation=activation,
            use_bias=False,
            kernel_initializer=self.initializer,
            name="Decoder-Output-LM",
        )

    #: its self-attention sees the start id 0 (no padding mask reaches it, as in bert4keras)
    decode_masks_padding = False

    def cache_refusal(self):
        """None: T5's decoder is causal by itself (with its LM head: ``with_lm``)."""
        if not self.with_lm:
            return "T5_Decoder was built with with_lm=False: it has no language-model head"
        return None

    def decode_inputs(self, token_ids, segment_ids, context):
        return [context, token_ids]

    def decode_position(self, inputs, index):
        """The (context, hidden states [B, T, H]) pair at one position of the hidden states."""
        context, x = inputs
        return [context, super().decode_position(x, index)]

    def decode_logits(self, inputs):
        """Log-probabilities (or, with ``with_lm='linear'``, the logits) [B, T, V] of the LM head:
        either is a logit vector to the decoding loop."""
        output = ops.cast(self.apply_final_layers(inputs), "float32")
        return output if self.with_lm == "linear" else ops.log(output)

    def compute_attention_bias(self, inputs=None):
        """The causal mask of the graph built last (bert4keras's method)."""
        return self.attention_bias

    def compute_position_bias(self, inputs=None):
        """(self-attention bias, cross-attention bias) of the graph built last."""
        return self.position_bias


@register("t5.1.1", arguments={"version": "t5.1.1"})
@register("mt5.1.1", arguments={"version": "mt5.1.1"})
@register("t5", "t5.1.0")
class T5(T5_Base):
    """T5's encoder-decoder: ``encoder`` and ``decoder`` (keras models sharing the layers,
    ``Embedding-Token`` among them) and ``model``, the decoder on the encoder's output:
    inputs ``[Encoder-Input-Token, Decoder-Input-Token]``, output the decoder's."""

    is_seq2seq = True

    def __init__(self, with_lm=True, cross_position_bias=True, **kwargs):
        super().__init__(**kwargs)
        shared = dict(kwargs, layers=self.layers)
        name = shared.pop("name", None)
        self.with_lm = with_lm
        self.cross_position_bias = cross_position_bias
        self._encoder = T5_Encoder(name=f"{name}_Encoder" if name else "Encoder", **shared)
        self._decoder = T5_Decoder(
            with_lm=with_lm,
            cross_position_bias=cross_position_bias,
            name=f"{name}_Decoder" if name else "Decoder",
            **shared,
        )
        self.encoder = self.decoder = None

    def build_graph(self, additional_input_layers=None):
        self.encoder = self._encoder.build()
        self.decoder = self._decoder.build()
        tokens = list(self.decoder.inputs[1:])
        self.set_inputs(list(self.encoder.inputs) + tokens, additional_input_layers)
        self.set_outputs(self._decoder.call(list(self.encoder.outputs) + tokens))
        self.encoder_output = self.encoder.outputs[0]


@register_backbone
class T5EncoderBackbone(Backbone):
    """``T5_Encoder`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = T5_Encoder


@register_backbone
class T5DecoderBackbone(Backbone):
    """``T5_Decoder`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = T5_Decoder


@register_backbone
class T5Backbone(Backbone):
    """``T5``'s joint model as a keras.Model class of its own; ``backbone.transformer.encoder``
    and ``.decoder`` are the two halves (plain keras models over the same layers)."""

    transformer_class = T5
