"""NEZHA."""
from gau_keras.models.nezha.model import NEZHA

__all__ = ["NEZHA"]
