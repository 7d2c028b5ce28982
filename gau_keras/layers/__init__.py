"""Keras 3 layers of gau_keras; importing this module registers them all for
``keras.models.load_model``."""
from gau_keras.layers.srupp import SRUpp, SRUppAttention, SRUppCell, SRUppProjectedLinear  # noqa: F401
