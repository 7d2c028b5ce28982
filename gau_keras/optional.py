"""Imports of optional dependencies with a one-line error that names what to install.

TensorFlow is needed only where it is the point: TF1 checkpoints, tf.data
input, SavedModel export, the TensorFlow backend.  A JAX host without it
(GPU and TPU images often have none) builds, trains and saves models in the
Keras format; asking for one of those features there raises ``ImportError``
naming the feature and the package.
"""

import importlib


def tensorflow(purpose):
    """The ``tensorflow`` module; ImportError "<purpose> needs TensorFlow ..." without it."""
    try:
        return importlib.import_module("tensorflow")
    except ImportError as error:
        raise ImportError(
            f"gau_keras: {purpose} needs TensorFlow, which is not installed here "
            f"({error}); pip install 'tensorflow>=2.16,<2.22'"
        ) from None


def sentencepiece(purpose):
    """The ``sentencepiece`` module; ImportError "<purpose> needs sentencepiece ..." without it."""
    try:
        return importlib.import_module("sentencepiece")
    except ImportError as error:
        raise ImportError(
            f"gau_keras: {purpose} needs sentencepiece, which is not installed here "
            f"({error}); pip install 'sentencepiece>=0.1.99,<0.3'"
        ) from None
