"""ELECTRA."""
from gau_keras.models.electra.model import ELECTRA

__all__ = ["ELECTRA"]
