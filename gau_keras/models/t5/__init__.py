"""T5 (t5.1.0, t5.1.1, mT5.1.1): encoder, decoder and the encoder-decoder."""

from gau_keras.models.t5.model import (
    T5,
    T5_Base,
    T5_Decoder,
    T5_Encoder,
    T5Backbone,
    T5DecoderBackbone,
    T5EncoderBackbone,
)

__all__ = ["T5", "T5_Base", "T5_Decoder", "T5_Encoder", "T5Backbone", "T5DecoderBackbone", "T5EncoderBackbone"]
