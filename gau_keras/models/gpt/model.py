"""bert4keras's decoder-only language models: GPT (BERT's post-norm blocks, no embedding norm),
GPT2 (pre-norm blocks and a final norm, CPM-LM's layout) and GPT2_ML (gpt2-ml's order). All
three are causal (the lower-triangular ``Attention-LM-Mask``) and end in the tied token
embedding: their output is the LM distribution [B, L, V].

Design notes: docs/models.md (The GPT family).
"""

import keras

from gau_keras.layers import Add
from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.bert.checkpoint import BERT_BLOCK, block_names, dense, embedding_names, norm
from gau_keras.models.bert.model import BERT
from gau_keras.models.registry import register

#: GPT2's norms sit before the sub-layers: the checkpoint calls them input/LayerNorm
GPT2_BLOCK = {**BERT_BLOCK, "attention_norm": "attention/input/LayerNorm/", "output_norm": "input/LayerNorm/"}


def gpt_names(num_layers, parts=None):
    """The table of a GPT (``parts``: GPT2_BLOCK for GPT2) of ``num_layers`` layers: BERT's names
    under gpt/ with transformer/ for encoder/, without the embedding norm and the heads."""
    embeddings = embedding_names("gpt/transformer/")
    mapping = {
        "Embedding-Token": {"embeddings": "gpt/embeddings/word_embeddings"},
        "Embedding-Segment": {"embeddings": "gpt/embeddings/token_type_embeddings"},
        "Embedding-Position": {"embeddings": "gpt/embeddings/position_embeddings"},
        "Embedding-Mapping": embeddings["Embedding-Mapping"],
    }
    for i in range(num_layers):
        mapping.update(block_names(f"Transformer-{i}", f"gpt/transformer/layer_{i}/", parts))
    return mapping


def gpt2_ml_names(num_layers):
    """The table of a GPT2_ML of ``num_layers`` layers (gpt2-ml's newslm/ names)."""
    mapping = {
        "Embedding-Token": {"embeddings": "newslm/embeddings/word_embed"},
        "Embedding-Position": {"embeddings": "newslm/embeddings/pos_embed"},
        "Embedding-Norm": norm("newslm/embeddings/LayerNorm_embed_norm/"),
    }
    for i in range(num_layers):
        scope, block = f"newslm/layer{i:02d}/", f"Transformer-{i}"
        attention = {}
        for part, name in (
            ("q_dense", "query_layer/"),
            ("k_dense", "key_layer/"),
            ("v_dense", "value_layer/"),
            ("o_dense", "context_projection_layer/"),
        ):
            attention.update({f"{part}.{attr}": ckpt for attr, ckpt in dense(scope + name).items()})
        mapping[f"{block}-MultiHeadSelfAttention"] = attention
        mapping[f"{block}-FeedForward-Norm-0"] = norm(scope + "LayerNorm_mlp_ln0/")
        mapping[f"{block}-FeedForward"] = {
            **{f"i0_dense.{attr}": ckpt for attr, ckpt in dense(scope + "intermediate/").items()},
            **{f"o_dense.{attr}": ckpt for attr, ckpt in dense(scope + "output/").items()},
        }
        mapping[f"{block}-FeedForward-Norm-1"] = norm(scope + "LayerNorm_mlp_ln1/")
    return mapping


@register("gpt")
class GPT(BERT):
    """GPT (bert4keras names, options and outputs).

    Inputs (floatx): ``Input-Token`` [B, L] ids (0 = padding), ``Input-Segment`` [B, L] (unless
    ``segment_vocab_size=0``) and, with ``custom_position_ids``, ``Input-Position`` [B, L].
    Embeddings: token + segment + position, Embedding-Dropout (no norm). Blocks: BERT's
    (post-norm, epsilon 1e-12), under the causal mask. Output: Embedding-Token (the tied matrix)
    -> ``LM-Activation`` (``final_activation``: softmax probabilities [B, L, V], 'linear' for
    logits). As in bert4keras the model is always a language model: ``application`` 'encoder'
    (the builder's default) or 'lm' builds it; 'unilm', ``with_mlm`` and ``with_pool`` are refused.
    """

    is_encoder = False
    has_mlm_head = False  # its LM head is not bert4keras's with_mlm: fill-mask needs a bidirectional model
    supports_pooler = False
    supports_nsp = False
    supports_residual_attention_scores = False
    mlm_activation_name = "LM-Activation"
    checkpoint_prefix = "gpt/"

    def __init__(self, *args, final_activation="softmax", application="lm", with_mlm=False, **kwargs):
        model = type(self).__name__
        if application not in ("encoder", "lm"):
            raise ValueError(
                f"application={application!r}: {model} is a causal language model (its mask is always "
                f"the LM mask); use application='lm' (or leave it out)"
            )
        if with_mlm:
            raise ValueError(
                f"with_mlm={with_mlm!r}: {model}'s output is always its LM head (the tied token "
                f"embedding); choose its activation with final_activation ('softmax', 'linear', ...)"
            )
        try:
            keras.activations.get(final_activation)
        except (TypeError, ValueError) as error:
            raise ValueError(f"final_activation={final_activation!r} is not a Keras activation ({error})") from None
        super().__init__(*args, application="lm", **kwargs)
        if self.embedding_size != self.hidden_size:
            raise ValueError(
                f"embedding_size={self.embedding_size} != hidden_size={self.hidden_size}: {model}'s LM "
                f"head multiplies the hidden states by the tied token embedding, so they must be equal"
            )
        self.final_activation = final_activation
        self.with_mlm = final_activation  # the LM head, with this activation (apply_mlm_head)

    def embedding_tail(self, x):
        """GPT: Embedding-Dropout only (no embedding norm)."""
        return self.apply(x, keras.layers.Dropout, rate=self.dropout_rate, name="Embedding-Dropout")

    def mlm_transform(self, x, width, arguments=None):
        """None: the hidden states meet the tied token embedding directly."""
        return x

    def mlm_output_bias(self, logits):
        """None: GPT's LM head has no output bias."""
        return logits

    def variable_mapping(self):
        return gpt_names(self.num_hidden_layers)

    def embedding_variable_names(self):
        return {"gpt/embeddings/word_embeddings"}


class _TokenOnly:
    """GPT2 and GPT2_ML read token ids only (bert4keras ignores a config's type_vocab_size)."""

    takes_segment_ids = False
    supports_custom_position_ids = False
    supports_shared_segment_embeddings = False

    def __init__(self, *args, segment_vocab_size=0, **kwargs):
        super().__init__(*args, segment_vocab_size=0, **kwargs)


@register("gpt2")
class GPT2(_TokenOnly, GPT):
    """GPT2 as bert4keras builds it (the CPM-LM layout): input ``Input-Token`` only; embeddings:
    token + position (no norm, no dropout); blocks pre-norm: Norm -> sub-layer -> Dropout -> Add
    (epsilon 1e-5); then ``Output-Norm`` -> ``Output-Dropout`` -> the tied LM head."""

    block_norm_epsilon = 1e-5

    def embedding_tail(self, x):
        return x

    def sublayer_input(self, x, name):
        return self.layer_norm(x, f"{name}-Norm", self.norm_epsilon(self.block_norm_epsilon))

    def residual(self, x, y, name):
        y = self.apply(y, keras.layers.Dropout, rate=self.dropout_rate, name=f"{name}-Dropout")
        return self.apply([x, y], Add, name=f"{name}-Add")

    def output_norm(self, x):
        """Output-Norm -> Output-Dropout: what the LM head reads."""
        x = self.layer_norm(x, "Output-Norm", self.norm_epsilon(self.block_norm_epsilon))
        return self.apply(x, keras.layers.Dropout, rate=self.dropout_rate, name="Output-Dropout")

    def apply_final_layers(self, x):
        return super().apply_final_layers(self.output_norm(x))

    def decode_logits(self, x):
        return super().decode_logits(self.output_norm(x))

    def variable_mapping(self):
        mapping = gpt_names(self.num_hidden_layers, GPT2_BLOCK)
        mapping["Output-Norm"] = norm("gpt/output/LayerNorm/")
        return mapping


@register("gpt2_ml")
class GPT2_ML(_TokenOnly, GPT):
    """GPT2_ML (imcaspar/gpt2-ml) as bert4keras builds it: input ``Input-Token`` only; embeddings:
    token + position -> Embedding-Norm (no dropout); blocks: attention -> Dropout -> Add, then
    FeedForward-Norm-0 -> FFN -> Dropout -> Add -> FeedForward-Norm-1 (epsilon 1e-5); the tied
    LM head. Checkpoint names: gpt2-ml's newslm/."""

    embedding_norm_epsilon = 1e-5
    block_norm_epsilon = 1e-5

    def embedding_tail(self, x):
        return self.layer_norm(x, "Embedding-Norm", self.norm_epsilon(self.embedding_norm_epsilon))

    def sublayer_input(self, x, name):
        if not name.endswith("-FeedForward"):
            return x
        return self.layer_norm(x, f"{name}-Norm-0", self.norm_epsilon(self.block_norm_epsilon))

    def residual(self, x, y, name):
        y = self.apply(y, keras.layers.Dropout, rate=self.dropout_rate, name=f"{name}-Dropout")
        x = self.apply([x, y], Add, name=f"{name}-Add")
        if not name.endswith("-FeedForward"):
            return x
        return self.layer_norm(x, f"{name}-Norm-1", self.norm_epsilon(self.block_norm_epsilon))

    def variable_mapping(self):
        return gpt2_ml_names(self.num_hidden_layers)

    def embedding_variable_names(self):
        return {"newslm/embeddings/word_embed"}


@register_backbone
class GPTBackbone(Backbone):
    """``GPT`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = GPT


@register_backbone
class GPT2Backbone(Backbone):
    """``GPT2`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = GPT2


@register_backbone
class GPT2MLBackbone(Backbone):
    """``GPT2_ML`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = GPT2_ML
