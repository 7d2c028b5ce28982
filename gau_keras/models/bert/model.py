"""BERT (and RoBERTa, which has BERT's graph and checkpoint), bert4keras's default model.

Design notes: docs/models.md (BERT and its family).
"""

import keras

from gau_keras.layers import Add, Embedding, FeedForward, MultiHeadAttention, PositionEmbedding, ScaleOffset
from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.base import Transformer
from gau_keras.models.bert.checkpoint import bert_names
from gau_keras.models.registry import register


@register("bert", "roberta")
class BERT(Transformer):
    """BERT (bert4keras names, options and outputs).

    Inputs (floatx, as bert4keras's): ``Input-Token`` [B, L] ids (0 = padding),
    ``Input-Segment`` [B, L] (unless ``segment_vocab_size=0``) and, with
    ``custom_position_ids``, ``Input-Position`` [B, L]. Each block: attention ->
    Dropout -> Add -> LayerNorm -> FFN -> Dropout -> Add -> LayerNorm (post-norm,
    biases everywhere). Output: hidden states [B, L, H]; with ``with_pool`` the
    pooled [CLS] vector [B, H] (``Pooler-Dense``, tanh or the named activation),
    with ``with_nsp`` its next-sentence probabilities [B, 2] instead; with
    ``with_mlm`` the MLM probabilities [B, L, V] (logits with ``'linear'``); with
    both heads ``[pool or nsp, mlm]``.

    Subclasses change the parts that differ: ``absolute_positions`` (NEZHA and
    RoFormer have none), ``attention_position`` (relative / rotary), ``block_name``
    (ALBERT shares one block), the norms' epsilons and the checkpoint table.
    """

    supports_pooler = True
    supports_custom_position_ids = True
    supports_nsp = True
    supports_hierarchical_position = True
    supports_shared_segment_embeddings = True
    supports_residual_attention_scores = True
    supports_layer_norm_cond = True

    #: whether the embeddings add BERT's trained absolute position table
    absolute_positions = True
    #: epsilon of the embedding norm and of the blocks' norms (None: Keras's 1e-7)
    embedding_norm_epsilon = 1e-12
    block_norm_epsilon = 1e-12
    required_config_keys = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
    )
    #: the variable scope of the encoder in the checkpoint
    checkpoint_prefix = "bert/"

    def __init__(
        self,
        vocab_size,
        hidden_size,
        num_hidden_layers,
        num_attention_heads=1,
        intermediate_size=None,
        hidden_act="gelu",
        max_position=512,
        with_nsp=False,
        with_pool=False,
        **kwargs,
    ):
        # bert4keras: the next-sentence head sits on the pooler
        with_pool = with_pool or bool(with_nsp)
        super().__init__(
            vocab_size,
            hidden_size,
            num_hidden_layers,
            num_attention_heads=num_attention_heads,
            intermediate_size=intermediate_size,
            hidden_act=hidden_act,
            max_position=max_position,
            with_nsp=with_nsp,
            with_pool=with_pool,
            **kwargs,
        )

    @property
    def initializer(self):
        return keras.initializers.TruncatedNormal(stddev=0.02)

    # ------------------------------------------------------------- embeddings
    def apply_embeddings(self, inputs):
        inputs = list(inputs)
        x = inputs.pop(0)
        segments = inputs.pop(0) if self.segment_vocab_size > 0 else None
        positions = inputs.pop(0) if self.custom_position_ids else None
        x = self.embed_tokens(x)
        if segments is not None:
            name = "Embedding-Token" if self.shared_segment_embeddings else "Embedding-Segment"
            s = self.apply(
                segments,
                Embedding,
                input_dim=self.segment_vocab_size,
                output_dim=self.embedding_size,
                embeddings_initializer=self.initializer,
                name=name,
            )
            x = self.apply([x, s], Add, name="Embedding-Token-Segment")
        if self.absolute_positions:
            x = self.apply(
                self.simplify([x, positions]),
                PositionEmbedding,
                input_dim=self.max_position,
                output_dim=self.embedding_size,
                merge_mode="add",
                hierarchical=self.hierarchical_position,
                embeddings_initializer=self.initializer,
                custom_position_ids=self.custom_position_ids,
                name="Embedding-Position",
            )
        x = self.embedding_tail(x)
        if self.embedding_size != self.hidden_size:
            x = self.apply(
                x,
                keras.layers.Dense,
                units=self.hidden_size,
                kernel_initializer=self.initializer,
                name="Embedding-Mapping",
            )
        return x

    def embedding_tail(self, x):
        """Hook: what follows the sum of the embeddings: Embedding-Norm -> Embedding-Dropout."""
        x = self.layer_norm(x, "Embedding-Norm", self.norm_epsilon(self.embedding_norm_epsilon))
        return self.apply(x, keras.layers.Dropout, rate=self.dropout_rate, name="Embedding-Dropout")

    def norm_epsilon(self, default):
        """The config's ``layer_norm_epsilon`` (``layer_norm_eps``) when it gives one, else bert4keras's
        epsilon of that norm (bert4keras itself ignores the config's)."""
        return self.layer_norm_epsilon or default

    # ------------------------------------------------------------------ blocks
    def block_name(self, index):
        """The layer-name stem of block ``index`` (ALBERT: one shared block)."""
        return f"Transformer-{index}"

    def attention_position(self, x):
        """(position input of the attention or None, its ``p_bias``): none in BERT."""
        return None, None

    def sublayer_input(self, x, name):
        """Hook: the input of sub-layer ``name`` (attention or feed-forward): ``x`` itself in
        BERT's post-norm blocks (a pre-norm block normalises it here)."""
        return x

    def residual(self, x, y, name):
        """Dropout -> Add -> LayerNorm (post-norm) around a sub-layer output."""
        y = self.apply(y, keras.layers.Dropout, rate=self.dropout_rate, name=f"{name}-Dropout")
        x = self.apply([x, y], Add, name=f"{name}-Add")
        return self.layer_norm(x, f"{name}-Norm", self.norm_epsilon(self.block_norm_epsilon))

    def apply_main_layers(self, x, index):
        block = self.block_name(index)
        name = f"{block}-MultiHeadSelfAttention"
        bias = self.compute_attention_bias(x)
        position, p_bias = self.attention_position(x)
        h = self.sublayer_input(x, name)
        inputs = [h, h, h] + [t for t in (bias, position) if t is not None]
        y = self.apply(
            inputs,
            MultiHeadAttention,
            arguments={"a_bias": bias is not None, "p_bias": p_bias},
            heads=self.num_attention_heads,
            head_size=self.attention_head_size,
            out_dim=self.hidden_size,
            key_size=self.attention_key_size,
            normalization=self.normalization,
            attention_dropout=self.attention_dropout_rate,
            softmax_plus_min_len=self.softmax_plus_min_len,
            recompute=self.recompute,
            kernel_initializer=self.initializer,
            name=name,
        )
        x = self.residual(x, y, name)
        name = f"{block}-FeedForward"
        y = self.apply(
            self.sublayer_input(x, name),
            FeedForward,
            units=self.intermediate_size,
            activation=self.hidden_act,
            recompute=self.recompute,
            kernel_initializer=self.initializer,
            name=name,
        )
        return self.residual(x, y, name)

    # ------------------------------------------------------------------- heads
    mlm_activation_name = "MLM-Activation"

    def apply_pooler(self, x):
        """The pooler (``Transformer.apply_pooler``), under the next-sentence head ``NSP-Proba``
        [B, 2] with ``with_nsp``."""
        pooled = super().apply_pooler(x)
        if not self.with_nsp:
            return pooled
        return self.apply(
            pooled,
            keras.layers.Dense,
            units=2,
            activation="softmax",
            dtype="float32",
            kernel_initializer=self.initializer,
            name="NSP-Proba",
        )

    def mlm_transform(self, x, width, arguments=None):
        """BERT's MLM transform: MLM-Dense (hidden_act, to the embedding size) -> MLM-Norm."""
        x = self.apply(
            x,
            keras.layers.Dense,
            units=self.embedding_size,
            activation=self.hidden_act,
            kernel_initializer=self.initializer,
            name="MLM-Dense",
        )
        return self.layer_norm(x, "MLM-Norm", self.norm_epsilon(1e-12))

    def mlm_output_bias(self, logits):
        # float32 under mixed precision: the tied embedding's logits are float32 (mode='dense')
        return self.apply(logits, ScaleOffset, scale=False, dtype="float32", name="MLM-Bias")

    def mlm_logits(self, hidden, training=False):
        """The MLM head up to its logits on hidden states [..., H] -> [..., V] (``mlm_head_logits``:
        MLM-Dense -> MLM-Norm -> the tied token embedding -> MLM-Bias); ``training`` changes
        nothing (no dropout in BERT's head)."""
        return self.mlm_head_logits(hidden, self.hidden_size)

    # -------------------------------------------------------------- checkpoint
    def variable_mapping(self):
        return bert_names(self.num_hidden_layers, self.checkpoint_prefix)

    def embedding_variable_names(self):
        return {self.checkpoint_prefix + "embeddings/word_embeddings", "cls/predictions/output_bias"}

    def transposed_variable_names(self):
        return {"cls/seq_relationship/output_weights"}

    def optional_variables(self):
        """None: a BERT checkpoint missing a variable the model uses is an error, as in bert4keras
        (``ignore_invalid_weights=True`` keeps the initial weights instead)."""
        return set()


@register_backbone
class BertBackbone(Backbone):
    """``BERT`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = BERT
