"""Model classes: one package per architecture (the bert4keras builder class, its
``Backbone`` and its checkpoint names), the names they answer to (``registry``), where a model
comes from (``presets``), ``build_transformer_model`` on top."""

from gau_keras.models.albert import ALBERT, ALBERT_Unshared, AlbertBackbone, AlbertUnsharedBackbone
from gau_keras.models.backbone import BACKBONES, Backbone
from gau_keras.models.base import Transformer
from gau_keras.models.bert import BERT, BertBackbone
from gau_keras.models.builder import (
    build_transformer_model,
    extend_with_language_model,
    extend_with_unified_language_model,
)
from gau_keras.models.checkpointing import CheckpointWarning
from gau_keras.models.electra import ELECTRA, ElectraBackbone
from gau_keras.models.gau_alpha import GAU_alpha, GAUAlphaBackbone
from gau_keras.models.gpt import GPT, GPT2, GPT2_ML, GPT2Backbone, GPT2MLBackbone, GPTBackbone
from gau_keras.models.nezha import NEZHA, NezhaBackbone
from gau_keras.models.registry import MODELS, model_names, register, resolve_model_class
from gau_keras.models.roformer import RoFormer, RoformerBackbone
from gau_keras.models.roformer_v2 import RoFormerV2, RoformerV2Backbone
from gau_keras.models.srupp import SRUppBackbone, SRUppModel
from gau_keras.models.t5 import T5, T5_Base, T5_Decoder, T5_Encoder, T5Backbone, T5DecoderBackbone, T5EncoderBackbone

__all__ = [
    "Transformer",
    "MODELS",
    "model_names",
    "register",
    "resolve_model_class",
    "build_transformer_model",
    "CheckpointWarning",
    "extend_with_language_model",
    "extend_with_unified_language_model",
    "Backbone",
    "BACKBONES",
    "BERT",
    "ALBERT",
    "ALBERT_Unshared",
    "NEZHA",
    "RoFormer",
    "ELECTRA",
    "RoFormerV2",
    "GAU_alpha",
    "SRUppModel",
    "GPT",
    "GPT2",
    "GPT2_ML",
    "T5_Base",
    "T5",
    "T5_Encoder",
    "T5_Decoder",
    "BertBackbone",
    "AlbertBackbone",
    "AlbertUnsharedBackbone",
    "NezhaBackbone",
    "RoformerBackbone",
    "ElectraBackbone",
    "RoformerV2Backbone",
    "GAUAlphaBackbone",
    "SRUppBackbone",
    "GPTBackbone",
    "GPT2Backbone",
    "GPT2MLBackbone",
    "T5Backbone",
    "T5EncoderBackbone",
    "T5DecoderBackbone",
]
