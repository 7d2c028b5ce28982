"""NEZHA."""

from gau_keras.models.nezha.model import NEZHA, NezhaBackbone

__all__ = ["NEZHA", "NezhaBackbone"]
