"""RoFormer (v1)."""
from gau_keras.models.roformer.model import RoFormer

__all__ = ["RoFormer"]
