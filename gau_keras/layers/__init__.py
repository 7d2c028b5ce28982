"""Keras 3 layers of gau_keras; importing this module registers them all for
``keras.models.load_model``."""
