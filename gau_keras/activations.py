"""The activations gau_keras's layers resolve by name, and which GELU the name 'gelu' means.

``get(identifier)`` is ``keras.activations.get`` except for the name ``'gelu'``, which
follows ``set_gelu``: Keras's exact GELU by default, ``gelu_tanh`` after
``set_gelu('tanh')`` (bert4keras's switch, ``gau_keras.backend.set_gelu``). The choice is
read by gau_keras's layers when they are built (``FeedForward``, the conditional
``LayerNormalization``) and by the bert4keras face's ``keras.activations.get``; Keras's own
table is left as it is, so ``keras.activations.get('gelu')`` and ``Dense(activation='gelu')``
are Keras's exact GELU whatever the setting.
"""

import keras

from gau_keras.registration import PACKAGE

__all__ = ["gelu_erf", "gelu_tanh", "get", "set_gelu", "gelu_version"]


@keras.saving.register_keras_serializable(package=PACKAGE)
def gelu_erf(x):
    """GELU, exact: 0.5 x (1 + erf(x / sqrt 2))."""
    return keras.activations.gelu(x, approximate=False)


@keras.saving.register_keras_serializable(package=PACKAGE)
def gelu_tanh(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return keras.activations.gelu(x, approximate=True)


#: what 'gelu' resolves to per version; exact GELU is Keras's own (same formula), which keeps
#: saved models free of gau_keras names
_GELU = {"erf": keras.activations.gelu, "tanh": gelu_tanh}
_setting = {"gelu": "erf"}


def set_gelu(version):
    """Makes the name 'gelu' mean the 'erf' (exact, the default) or the 'tanh' GELU in the
    layers of gau_keras built afterwards (a layer keeps the function it was built with)."""
    version = str(version).lower()
    if version not in _GELU:
        raise ValueError(f"set_gelu: version must be 'erf' or 'tanh', got {version!r}")
    _setting["gelu"] = version


def gelu_version():
    """'erf' or 'tanh': what the name 'gelu' means now."""
    return _setting["gelu"]


def get(identifier):
    """``keras.activations.get(identifier)``, with 'gelu' as ``set_gelu`` chose."""
    if isinstance(identifier, str) and identifier == "gelu":
        return _GELU[_setting["gelu"]]
    return keras.activations.get(identifier)
