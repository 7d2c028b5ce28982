"""ALBERT and ALBERT_Unshared."""
from gau_keras.models.albert.model import ALBERT, ALBERT_Unshared

__all__ = ["ALBERT", "ALBERT_Unshared"]
