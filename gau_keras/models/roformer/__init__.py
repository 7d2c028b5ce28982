"""RoFormer (v1)."""

from gau_keras.models.roformer.model import RoFormer, RoformerBackbone

__all__ = ["RoFormer", "RoformerBackbone"]
