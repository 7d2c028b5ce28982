"""ALBERT and ALBERT_Unshared."""

from gau_keras.models.albert.model import ALBERT, ALBERT_Unshared, AlbertBackbone, AlbertUnsharedBackbone

__all__ = ["ALBERT", "ALBERT_Unshared", "AlbertBackbone", "AlbertUnsharedBackbone"]
