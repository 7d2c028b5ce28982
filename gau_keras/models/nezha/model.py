"""NEZHA (Huawei): BERT with relative position embeddings in the attention instead of
absolute ones in the embeddings.

Design notes: docs/models.md (BERT and its family).
"""

from gau_keras.initializers import Sinusoidal
from gau_keras.layers import RelativePositionEmbedding
from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.bert.model import BERT
from gau_keras.models.registry import register


@register("nezha")
class NEZHA(BERT):
    """NEZHA (bert4keras names): no ``Embedding-Position``; every attention adds Shaw et
    al.'s relative terms from ``Embedding-Relative-Position``, a fixed sinusoidal table
    [2 * max_relative_position + 1, attention_key_size] over the clipped offsets
    (not trained, not in the checkpoint)."""

    absolute_positions = False
    embedding_norm_epsilon = None
    block_norm_epsilon = None
    supports_custom_position_ids = False
    supports_hierarchical_position = False

    def __init__(self, *args, max_relative_position=64, **kwargs):
        super().__init__(*args, **kwargs)
        if (
            isinstance(max_relative_position, bool)
            or not isinstance(max_relative_position, int)
            or max_relative_position < 1
        ):
            raise ValueError(f"max_relative_position must be an integer >= 1, got {max_relative_position!r}")
        self.max_relative_position = max_relative_position

    def attention_position(self, x):
        return self.compute_position_bias(x), "typical_relative"

    def compute_position_bias(self, inputs=None):
        """The relative embeddings [L, L, attention_key_size] of the graph of ``inputs``
        (hidden states [B, L, H]), built once per graph."""

        def build():
            return self.apply(
                [inputs, inputs],
                RelativePositionEmbedding,
                input_dim=2 * self.max_relative_position + 1,
                output_dim=self.attention_key_size,
                embeddings_initializer=Sinusoidal(),
                trainable=False,
                name="Embedding-Relative-Position",
            )

        if self._decode is not None:  # a cached pass: the new tokens' rows (models.decoding)
            return build()
        return self._position_biases.get_or_build(self.graph_input(inputs, "Input-Token"), build)


@register_backbone
class NezhaBackbone(Backbone):
    """``NEZHA`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = NEZHA
