"""BERT / RoBERTa: bert4keras's default model."""
from gau_keras.models.bert.model import BERT

__all__ = ["BERT"]
