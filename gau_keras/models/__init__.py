"""Model classes (bert4keras-style) and ``build_transformer_model``."""
from gau_keras.models.base import CheckpointWarning, Transformer
from gau_keras.models.builder import (
    MODELS,
    build_transformer_model,
    extend_with_language_model,
    extend_with_unified_language_model,
)
from gau_keras.models.gau_alpha import GAU_alpha
from gau_keras.models.roformer_v2 import RoFormerV2
from gau_keras.models.srupp import SRUppModel

__all__ = ["Transformer", "MODELS", "build_transformer_model", "GAU_alpha", "RoFormerV2", "SRUppModel",
           "CheckpointWarning", "extend_with_language_model", "extend_with_unified_language_model"]
