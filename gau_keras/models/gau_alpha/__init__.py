"""GAU-alpha: the model, its checkpoint names and the bundled preset."""

from gau_keras.models.gau_alpha.model import GAU_alpha, GAUAlphaBackbone

__all__ = ["GAU_alpha", "GAUAlphaBackbone"]
