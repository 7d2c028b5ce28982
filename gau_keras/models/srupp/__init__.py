"""SRU++ language models and encoders (bert4keras-style)."""

from gau_keras.models.srupp.model import SegmentMemory, SRUppBackbone, SRUppModel

__all__ = ["SRUppModel", "SRUppBackbone", "SegmentMemory"]
