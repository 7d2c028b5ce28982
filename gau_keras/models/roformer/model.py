"""RoFormer (v1, ZhuiyiTechnology): BERT with rotary position embeddings (RoPE) in the
attention instead of absolute ones in the embeddings. RoFormerV2 shares its RoPE
(``Transformer.compute_position_bias``, ``Embedding-Rotary-Position``).

Design notes: docs/models.md (BERT and its family).
"""

from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.bert.model import BERT
from gau_keras.models.registry import register


@register("roformer")
class RoFormer(BERT):
    """RoFormer (bert4keras names): NEZHA's embeddings (no ``Embedding-Position``),
    BERT's blocks with RoPE on q and k (``custom_position_ids`` gives the rotary
    positions), BERT's checkpoint names."""

    absolute_positions = False
    embedding_norm_epsilon = None
    block_norm_epsilon = None
    supports_hierarchical_position = False

    def attention_position(self, x):
        return self.compute_position_bias(x), "rotary"


@register_backbone
class RoformerBackbone(Backbone):
    """``RoFormer`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = RoFormer
