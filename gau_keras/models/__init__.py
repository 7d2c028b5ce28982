"""Model classes (bert4keras-style) and ``build_transformer_model``."""
