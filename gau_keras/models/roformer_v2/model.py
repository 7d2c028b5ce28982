"""RoFormerV2: post-norm, bias-free, parameter-free RMS norm, rotary MHA.

Design notes: docs/models.md.
"""

import keras

from gau_keras.layers import Add, Embedding, FeedForward, LayerNormalization, MultiHeadAttention
from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.base import Transformer
from gau_keras.models.bert.checkpoint import roformer_v2_names
from gau_keras.models.registry import register


@register("roformer_v2", "roformer-v2", "roformerv2")
class RoFormerV2(Transformer):
    """RoFormerV2 (bert4keras names).

    Inputs (floatx, as bert4keras's): ``Input-Token`` [B, L] ids (0 = padding), ``Input-Segment``
    [B, L] (unless ``segment_vocab_size=0``) and, with ``custom_position_ids``,
    ``Input-Position`` [B, L] (the rotary positions). Output: hidden states
    [B, L, H]; with ``with_mlm`` the MLM probabilities [B, L, V] (logits with
    ``with_mlm='linear'``); with ``with_pool`` the pooled [CLS] vector [B, H]
    (``Pooler-Dense``, tanh); with both, ``[pooled, mlm]`` (bert4keras's BERT
    rule; bert4keras's own RoFormerV2 ignores ``with_pool``).
    """

    initializer_order = 2
    supports_pooler = True
    supports_custom_position_ids = True

    def rms_norm(self, x, name):
        return self.apply(
            x,
            LayerNormalization,
            zero_mean=False,
            scale=False,
            offset=False,
            epsilon=self.layer_norm_epsilon,
            name=name,
        )

    def apply_embeddings(self, inputs):
        x = self.embed_tokens(inputs[0])
        if self.segment_vocab_size > 0:
            s = self.apply(
                inputs[1],
                Embedding,
                input_dim=self.segment_vocab_size,
                output_dim=self.embedding_size,
                embeddings_initializer=self.initializer,
                name="Embedding-Segment",
            )
            x = self.apply([x, s], Add, name="Embedding-Token-Segment")
        x = self.apply(x, keras.layers.Dropout, rate=self.dropout_rate, name="Embedding-Dropout")
        x = self.rms_norm(x, "Embedding-Norm")
        if self.embedding_size != self.hidden_size:
            x = self.apply(
                x,
                keras.layers.Dense,
                units=self.hidden_size,
                use_bias=False,
                kernel_initializer=self.initializer,
                name="Embedding-Mapping",
            )
        return x

    def residual(self, x, y, name):
        """Dropout -> Add -> RMS norm (post-norm) around a sub-layer output."""
        y = self.apply(y, keras.layers.Dropout, rate=self.dropout_rate, name=f"{name}-Dropout")
        x = self.apply([x, y], Add, name=f"{name}-Add")
        return self.rms_norm(x, f"{name}-Norm")

    def attention_inputs(self, x, n_main):
        """``[x]*n_main (+ bias) + [sinusoidal]`` and the call arguments."""
        bias = self.compute_attention_bias(x)
        position = self.compute_position_bias(x)
        inputs = [x] * n_main + ([bias] if bias is not None else []) + [position]
        return inputs, {"a_bias": bias is not None, "p_bias": "rotary"}

    def apply_main_layers(self, x, index):
        name = f"Transformer-{index}-MultiHeadSelfAttention"
        inputs, arguments = self.attention_inputs(x, 3)
        y = self.apply(
            inputs,
            MultiHeadAttention,
            arguments=arguments,
            heads=self.num_attention_heads,
            head_size=self.attention_head_size,
            out_dim=self.hidden_size,
            key_size=self.attention_key_size,
            use_bias=False,
            normalization=self.normalization,
            attention_dropout=self.attention_dropout_rate,
            softmax_plus_min_len=self.softmax_plus_min_len,
            recompute=self.recompute,
            kernel_initializer=self.initializer,
            name=name,
        )
        x = self.residual(x, y, name)
        name = f"Transformer-{index}-FeedForward"
        y = self.apply(
            x,
            FeedForward,
            units=self.intermediate_size,
            activation=self.hidden_act,
            use_bias=False,
            recompute=self.recompute,
            kernel_initializer=self.initializer,
            name=name,
        )
        return self.residual(x, y, name)

    def mlm_logits(self, hidden, training=False):
        """The tied MLM head on any hidden states [..., H] -> logits [..., V] (used by pretraining
        on the masked positions only): ``mlm_head_logits``, its dropout run as ``training`` says."""
        return self.mlm_head_logits(hidden, self.hidden_size, {"training": training})

    def variable_mapping(self):
        return roformer_v2_names(self.num_hidden_layers)


@register_backbone
class RoformerV2Backbone(Backbone):
    """``RoFormerV2`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = RoFormerV2
