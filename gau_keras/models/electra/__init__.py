"""ELECTRA."""

from gau_keras.models.electra.model import ELECTRA, ElectraBackbone

__all__ = ["ELECTRA", "ElectraBackbone"]
