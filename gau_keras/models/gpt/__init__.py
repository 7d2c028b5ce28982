"""GPT, GPT2 (the CPM-LM layout) and GPT2_ML: bert4keras's decoder-only language models."""

from gau_keras.models.gpt.model import GPT, GPT2, GPT2_ML, GPT2Backbone, GPT2MLBackbone, GPTBackbone

__all__ = ["GPT", "GPT2", "GPT2Backbone", "GPT2MLBackbone", "GPT2_ML", "GPTBackbone"]
