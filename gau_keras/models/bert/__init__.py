"""BERT / RoBERTa: bert4keras's default model."""

from gau_keras.models.bert.model import BERT, BertBackbone

__all__ = ["BERT", "BertBackbone"]
