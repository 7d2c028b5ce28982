"""RoFormerV2."""

from gau_keras.models.roformer_v2.model import RoFormerV2, RoformerV2Backbone

__all__ = ["RoFormerV2", "RoformerV2Backbone"]
