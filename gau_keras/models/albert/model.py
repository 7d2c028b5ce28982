"""ALBERT (one Transformer block shared by every layer) and ALBERT_Unshared (an ALBERT
checkpoint read into BERT's unshared blocks, each starting from the shared weights).

Design notes: docs/models.md (BERT and its family).
"""

from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.bert import checkpoint
from gau_keras.models.bert.model import BERT
from gau_keras.models.registry import register


@register("albert")
class ALBERT(BERT):
    """ALBERT (bert4keras names): BERT whose blocks are one set of layers,
    ``Transformer-MultiHeadSelfAttention`` / ``Transformer-FeedForward`` (and their
    ``-Norm``), applied ``num_hidden_layers`` times; the factorised embedding
    (``embedding_size`` < ``hidden_size``) goes through ``Embedding-Mapping``."""

    block_norm_epsilon = None

    def block_name(self, index):
        return "Transformer"

    def variable_mapping(self):
        mapping = super().variable_mapping()
        mapping.update(checkpoint.block_names("Transformer", checkpoint.ALBERT_GROUP, checkpoint.ALBERT_BLOCK))
        return mapping


@register("albert_unshared")
class ALBERT_Unshared(BERT):
    """ALBERT's checkpoint in BERT's graph: every block reads the one shared layer group,
    then trains on its own (``save_weights_as_checkpoint`` then needs the blocks equal)."""

    def variable_mapping(self):
        mapping = super().variable_mapping()
        for i in range(self.num_hidden_layers):
            mapping.update(checkpoint.block_names(f"Transformer-{i}", checkpoint.ALBERT_GROUP, checkpoint.ALBERT_BLOCK))
        return mapping


@register_backbone
class AlbertBackbone(Backbone):
    """``ALBERT`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = ALBERT


@register_backbone
class AlbertUnsharedBackbone(Backbone):
    """``ALBERT_Unshared`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = ALBERT_Unshared
