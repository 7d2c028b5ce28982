"""SRU++ models, bert4keras-style: token embedding → SRU++ layers → output tied
to the embedding.

    model = build_transformer_model(model="srupp", application="lm", vocab_size=V,
                                    hidden_size=512, num_hidden_layers=4, proj_size=128)

* ``application='lm'``: unidirectional, causal attention.  With
  ``memory_length=M > 0`` the model also takes, per layer i, ``Input-Memory-i``
  [B, M, width_i] (the previous segment's input to layer i) and
  ``Input-State-i`` [B, d] (its final c), and returns
  ``[probabilities, Output-Memory-0.., Output-State-0..]`` to feed the next
  segment (Transformer-XL-style segment recurrence, as the SRU++ paper trains
  language models).
* ``application='encoder'``: bidirectional; the output is the hidden states
  [B, L, 2·d] (``with_mlm=True`` adds the tied MLM head); put a classifier on
  ``model.output`` or ``transformer.encoder_output``.

Layer names: ``Input-Token``, ``Embedding-Token``, ``Embedding-Dropout``,
``SRUpp-{i}`` (``SRUppCell``), ``Output-Mapping`` (when the embedding width
differs from the output width), ``Output-MLM-Dropout``, ``Output-MLM-Activation``.

TF1 checkpoint variable names (``variable_mapping``), for layer i:

    srupp/embeddings/word_embeddings                      [V, E]
    srupp/layer_{i}/transform/linear1/kernel              [d_in, p]
    srupp/layer_{i}/transform/linear2/kernel              [p, 2p] (attention) or [p, k·D]
    srupp/layer_{i}/transform/linear3/kernel              [p, k·D] (attention layers)
    srupp/layer_{i}/transform/alpha                       [1]      (attention layers)
    srupp/layer_{i}/transform/layer_norm/{gamma,beta}     [p]      (attn_layer_norm)
    srupp/layer_{i}/layer_norm/{gamma,beta}               (layer_norm)
    srupp/layer_{i}/weight_c, srupp/layer_{i}/bias        [2·D]
    cls/predictions/transform/dense/kernel                [D, E]   (Output-Mapping)

(D = dirs·hidden_size; kernels are Keras-layout [in, out].)

Design notes: docs/srupp.md.
"""

import keras
from keras import ops

from gau_keras.layers import SRUppAttention, SRUppCell
from gau_keras.layers.srupp import stacked_cell_options
from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.base import Transformer
from gau_keras.models.registry import register
from gau_keras.registration import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class SegmentMemory(keras.layers.Layer):
    """The next segment's memory: the last ``memory_length`` steps of
    concat(memory [B, M, W], inputs [B, L, W]) → [B, M, W]."""

    def __init__(self, memory_length, **kwargs):
        super().__init__(**kwargs)
        self.memory_length = memory_length

    def call(self, inputs):
        memory, x = inputs
        return ops.concatenate([memory, x], axis=1)[:, -self.memory_length :]

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0])

    def get_config(self):
        return {**super().get_config(), "memory_length": self.memory_length}


@register("srupp")
class SRUppModel(Transformer):
    """SRU++ language model / encoder (see the module docstring); not to be
    confused with the ``gau_keras.layers.SRUpp`` stack of SRU++ layers.

    hidden_size is the per-direction width d of every SRU++ layer, proj_size
    the attention width p (default hidden_size // 4, the paper's ratio),
    num_attention_heads the heads of each attention.
    """

    takes_segment_ids = False  # token ids only

    initializer_order = 2

    def __init__(
        self,
        vocab_size,
        hidden_size,
        num_hidden_layers,
        proj_size=None,
        layer_norm=False,
        normalize_after=False,
        attn_layer_norm=True,
        highway_bias=-2.0,
        attention_every_n_layers=1,
        attention_last_n_layers=-1,
        rescale=False,
        weight_c_init=1.0,
        memory_length=0,
        **kwargs,
    ):
        kwargs.setdefault("segment_vocab_size", 0)
        super().__init__(vocab_size, hidden_size, num_hidden_layers, **kwargs)
        if self.application == "unilm":
            raise ValueError("SRU++ models support application='lm' or 'encoder', not 'unilm'")
        if memory_length and self.application != "lm":
            raise ValueError(f"memory_length={memory_length} needs application='lm', got {self.application!r}")
        self.proj_size = proj_size or max(hidden_size // 4, 1)
        self.layer_norm, self.normalize_after = layer_norm, normalize_after
        self.attn_layer_norm, self.highway_bias = attn_layer_norm, highway_bias
        self.attention_every_n_layers = attention_every_n_layers
        self.attention_last_n_layers = attention_last_n_layers
        self.rescale, self.weight_c_init, self.memory_length = rescale, weight_c_init, memory_length
        self.bidirectional = self.application == "encoder"
        self.output_size = hidden_size * (2 if self.bidirectional else 1)
        self.new_memory, self.new_states = [], []

    def cache_refusal(self):
        """A causal SRU++ decodes over its cells' caches (attention keys and values, the
        recurrent state); one with segment memory takes inputs the cache does not hold."""
        return super().cache_refusal() or (
            f"SRU++ with memory_length={self.memory_length} takes the previous segment's memory and "
            f"states as inputs; cached decoding needs memory_length=0"
            if self.memory_length
            else None
        )

    def decode_logits(self, x):
        return self.mlm_head_logits(x, self.output_size)

    def layer_input_width(self, index):
        return self.embedding_size if index == 0 else self.output_size

    def get_inputs(self):
        inputs = [keras.Input(shape=(self.sequence_length,), dtype=keras.config.floatx(), name="Input-Token")]
        if self.memory_length:
            inputs += [
                keras.Input(shape=(self.memory_length, self.layer_input_width(i)), name=f"Input-Memory-{i}")
                for i in range(self.num_hidden_layers)
            ]
            inputs += [
                keras.Input(shape=(self.output_size,), name=f"Input-State-{i}") for i in range(self.num_hidden_layers)
            ]
        return inputs

    def apply_embeddings(self, inputs):
        x = self.embed_tokens(inputs[0])
        return self.apply(x, keras.layers.Dropout, rate=self.dropout_rate, name="Embedding-Dropout")

    def apply_main_layers(self, x, index):
        n = self.num_hidden_layers
        arguments = {}
        if self.memory_length:
            memory = self.inputs[1 + index]
            arguments = {"memory": memory, "initial_state": self.inputs[1 + n + index], "return_state": True}
            self.new_memory.append(
                self.apply([memory, x], SegmentMemory, memory_length=self.memory_length, name=f"Output-Memory-{index}")
            )
        options = stacked_cell_options(
            index,
            n,
            self.attention_every_n_layers,
            self.attention_last_n_layers,
            hidden_size=self.hidden_size,
            proj_size=self.proj_size,
            num_heads=self.num_attention_heads,
            dropout=self.dropout_rate,
            attn_dropout=self.attention_dropout_rate,
            bidirectional=self.bidirectional,
            layer_norm=self.layer_norm,
            normalize_after=self.normalize_after,
            attn_layer_norm=self.attn_layer_norm,
            highway_bias=self.highway_bias,
            rescale=self.rescale,
            weight_c_init=self.weight_c_init,
            causal=self.application == "lm",
        )
        y = self.apply(x, SRUppCell, arguments=arguments, name=f"SRUpp-{index}", **options)
        if self.memory_length:
            y, state = y
            # Reshape (a no-op here) because it drops the token mask, which a [B, D] state must not carry
            self.new_states.append(
                self.apply(state, keras.layers.Reshape, target_shape=(self.output_size,), name=f"Output-State-{index}")
            )
        return y

    def apply_final_layers(self, x):
        if self.with_mlm:
            x = self.apply_mlm_head(x, self.output_size)
        if self.memory_length:
            return [x] + self.new_memory + self.new_states
        return x

    def variable_mapping(self):
        mapping = {
            "Embedding-Token": {"embeddings": "srupp/embeddings/word_embeddings"},
            "Output-Mapping": {"kernel": "cls/predictions/transform/dense/kernel"},
        }
        for i in range(self.num_hidden_layers):
            cell = self.layers.get(self.prefixed(f"SRUpp-{i}"))
            if cell is None:
                continue
            prefix = f"srupp/layer_{i}/"
            names = {
                "weight_c": prefix + "weight_c",
                "bias": prefix + "bias",
                "transform.linear1.kernel": prefix + "transform/linear1/kernel",
                "transform.linear2.kernel": prefix + "transform/linear2/kernel",
            }
            if isinstance(cell.transform, SRUppAttention):
                names["transform.linear3.kernel"] = prefix + "transform/linear3/kernel"
                names["transform.alpha"] = prefix + "transform/alpha"
            if cell.transform.norm is not None:
                names["transform.norm.gamma"] = prefix + "transform/layer_norm/gamma"
                names["transform.norm.beta"] = prefix + "transform/layer_norm/beta"
            if cell.norm is not None:
                names["norm.gamma"] = prefix + "layer_norm/gamma"
                names["norm.beta"] = prefix + "layer_norm/beta"
            mapping[f"SRUpp-{i}"] = names
        return mapping

    def embedding_variable_names(self):
        return {"srupp/embeddings/word_embeddings"}


@register_backbone
class SRUppBackbone(Backbone):
    """``SRUppModel`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = SRUppModel
