"""Keras 3 layers of gau_keras; importing this module registers them all for
``keras.models.load_model``."""
from gau_keras.layers.attention import AttentionBias, GatedAttentionUnit, MultiHeadAttention
from gau_keras.layers.embeddings import Embedding, SinusoidalPositionEmbedding
from gau_keras.layers.feedforward import FeedForward
from gau_keras.layers.global_pointer import GlobalPointer
from gau_keras.layers.heads import (
                                    CandidateScores,
                                    ChoiceLogits,
                                    FirstToken,
                                    FlattenChoices,
                                    GatherPositions,
                                    SpanLogits,
)
from gau_keras.layers.merging import Add
from gau_keras.layers.normalization import LayerNormalization, ScaleOffset
from gau_keras.layers.srupp import SRUpp, SRUppAttention, SRUppCell, SRUppProjectedLinear

__all__ = ["AttentionBias", "GatedAttentionUnit", "MultiHeadAttention", "Embedding", "SinusoidalPositionEmbedding",
           "FeedForward", "GlobalPointer", "CandidateScores", "ChoiceLogits", "FirstToken", "FlattenChoices",
           "GatherPositions", "SpanLogits", "Add", "LayerNormalization", "ScaleOffset", "SRUpp", "SRUppAttention",
           "SRUppCell", "SRUppProjectedLinear"]
