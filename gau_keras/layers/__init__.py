"""Keras 3 layers of gau_keras; importing this module registers them all for
``keras.models.load_model``.

As ``bert4keras.layers`` (which star-imports ``keras.layers``), any other
name of ``keras.layers`` is importable from here too: ``from
gau_keras.layers import Dense, Lambda, Loss`` and ``from gau_keras.layers
import *`` work. Unlike bert4keras, nothing in ``keras.layers`` is replaced:
our GlobalMaxPooling1D (masked) is only ``gau_keras.layers.GlobalMaxPooling1D``.
"""

import keras as _keras

from gau_keras.layers.attention import AttentionBias, GatedAttentionUnit, MultiHeadAttention
from gau_keras.layers.crf import ConditionalRandomField, MaximumEntropyMarkovModel
from gau_keras.layers.embeddings import (
    Embedding,
    PositionEmbedding,
    RelativePositionEmbedding,
    RelativePositionEmbeddingT5,
    SinusoidalPositionEmbedding,
)
from gau_keras.layers.feedforward import FeedForward
from gau_keras.layers.global_pointer import EfficientGlobalPointer, GlobalPointer
from gau_keras.layers.heads import (
    CandidateScores,
    ChoiceLogits,
    FirstToken,
    FlattenChoices,
    GatherPositions,
    SpanLogits,
)
from gau_keras.layers.loss import Loss
from gau_keras.layers.merging import Add, Concatenate1D
from gau_keras.layers.normalization import LayerNormalization, ScaleOffset
from gau_keras.layers.pooling import GlobalMaxPooling1D
from gau_keras.layers.srupp import SRUpp, SRUppAttention, SRUppCell, SRUppProjectedLinear

__all__ = [
    "AttentionBias",
    "GatedAttentionUnit",
    "MultiHeadAttention",
    "ConditionalRandomField",
    "MaximumEntropyMarkovModel",
    "Embedding",
    "PositionEmbedding",
    "RelativePositionEmbedding",
    "RelativePositionEmbeddingT5",
    "SinusoidalPositionEmbedding",
    "FeedForward",
    "EfficientGlobalPointer",
    "GlobalPointer",
    "CandidateScores",
    "ChoiceLogits",
    "FirstToken",
    "FlattenChoices",
    "GatherPositions",
    "SpanLogits",
    "Loss",
    "Add",
    "Concatenate1D",
    "LayerNormalization",
    "ScaleOffset",
    "GlobalMaxPooling1D",
    "SRUpp",
    "SRUppAttention",
    "SRUppCell",
    "SRUppProjectedLinear",
]

#: what ``from gau_keras.layers import *`` brings: ours, then the rest of keras.layers (as bert4keras's star import)
__all__ += sorted(n for n in dir(_keras.layers) if not n.startswith("_") and n not in set(__all__))

#: bert4keras's ``custom_objects`` (its layers by name), for ``load_model(custom_objects=...)``
custom_objects = {
    name: globals()[name]
    for name in (
        "Embedding",
        "ScaleOffset",
        "Concatenate1D",
        "MultiHeadAttention",
        "GatedAttentionUnit",
        "LayerNormalization",
        "PositionEmbedding",
        "SinusoidalPositionEmbedding",
        "RelativePositionEmbedding",
        "RelativePositionEmbeddingT5",
        "FeedForward",
        "ConditionalRandomField",
        "MaximumEntropyMarkovModel",
        "GlobalPointer",
        "EfficientGlobalPointer",
        "Loss",
    )
}


def __getattr__(name):
    """Falls back to ``keras.layers`` (Dense, Lambda, Input, ...), as bert4keras.layers does."""
    if not name.startswith("_") and hasattr(_keras.layers, name):
        return getattr(_keras.layers, name)
    raise AttributeError(f"module 'gau_keras.layers' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {n for n in dir(_keras.layers) if not n.startswith("_")})
