"""The ``keras`` that ``gau_keras.backend`` hands out: Keras 3 seen through Keras 2's names.

``from gau_keras.backend import keras`` gives a namespace over the installed
Keras 3: every name falls through to Keras itself, except

* ``keras.Model`` and ``keras.models.Model``: ``gau_keras.bert4keras.model.Model``
  (Keras 2's calls: ``fit_generator``, nested lists, ...);
* ``keras.models.load_model`` / ``save_model``: any file name
  (``gau_keras.bert4keras.saving``);
* ``keras.losses`` and ``keras.metrics``: Keras 2's names added
  (``kullback_leibler_divergence``, ``mse``, ``logcosh``, ``cosine_proximity``, ...);
* ``keras.backend``: ``gau_keras.bert4keras.keras2_backend`` (Keras 2's backend functions);
* ``keras.activations.get``: 'gelu' as ``set_gelu`` chose (``gau_keras.activations.get``).

Nothing is added to Keras itself: ``import keras`` elsewhere in the process is
plain Keras 3. A script that imports from Keras directly (``from keras.models
import Model``, ``from keras.losses import kullback_leibler_divergence``) ports
with the README's one-line change, ``from keras.`` → ``from gau_keras.backend.keras.``:
the namespace's submodules are importable under that dotted name.
"""

import sys
import types

import keras as _keras

from gau_keras import activations as _activations
from gau_keras.bert4keras import keras2_backend
from gau_keras.bert4keras import model as _model
from gau_keras.bert4keras import saving as _saving

__all__ = ["keras", "LOSS_ALIASES", "METRIC_ALIASES"]

#: Keras 2 loss names → their Keras 3 functions' names
LOSS_ALIASES = {
    "kullback_leibler_divergence": "kl_divergence",
    "kld": "kl_divergence",
    "KLD": "kl_divergence",
    "mse": "mean_squared_error",
    "MSE": "mean_squared_error",
    "mae": "mean_absolute_error",
    "MAE": "mean_absolute_error",
    "mape": "mean_absolute_percentage_error",
    "MAPE": "mean_absolute_percentage_error",
    "msle": "mean_squared_logarithmic_error",
    "MSLE": "mean_squared_logarithmic_error",
    "logcosh": "log_cosh",
    "cosine_proximity": "cosine_similarity",
}
#: Keras 2 metric function names → Keras 3's (the losses Keras 2 also exported as metrics)
METRIC_ALIASES = {
    **{k: v for k, v in LOSS_ALIASES.items() if v != "cosine_similarity"},
    "cosine_proximity": "cosine_similarity",
}


class Namespace(types.ModuleType):
    """A module whose names fall through to ``base`` after its own."""

    def __init__(self, name, base, **names):
        super().__init__(name, getattr(base, "__doc__", None))
        self._base = base
        self.__dict__.update(names)

    def __getattr__(self, name):
        try:
            return getattr(self.__dict__["_base"], name)
        except AttributeError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None

    def __dir__(self):
        return sorted(set(dir(self._base)) | {n for n in self.__dict__ if not n.startswith("_")})


def _aliased(name, base, aliases):
    source = base if name != "metrics" else _keras.losses  # Keras 3's metrics lack some loss functions
    names = {}
    for old, new in aliases.items():
        names[old] = getattr(base, new, None) or getattr(source, new)
    return Namespace(f"gau_keras.backend.keras.{name}", base, **names)


models = Namespace(
    "gau_keras.backend.keras.models",
    _keras.models,
    Model=_model.Model,
    load_model=_saving.load_model,
    save_model=_saving.save_model,
)
losses = _aliased("losses", _keras.losses, LOSS_ALIASES)
activations = Namespace("gau_keras.backend.keras.activations", _keras.activations, get=_activations.get)
metrics = _aliased("metrics", _keras.metrics, METRIC_ALIASES)

#: what ``from gau_keras.backend import keras`` gives
keras = Namespace(
    "gau_keras.backend.keras",
    _keras,
    Model=_model.Model,
    models=models,
    losses=losses,
    metrics=metrics,
    activations=activations,
    backend=keras2_backend,
    __file__=__file__,
)

#: submodules importable by their dotted name, so that a script's ``from keras.models import Model``
#: ports as ``from gau_keras.backend.keras.models import Model`` (README's one-line change)
SUBMODULES = (
    "activations",
    "applications",
    "backend",
    "callbacks",
    "constraints",
    "initializers",
    "layers",
    "losses",
    "metrics",
    "models",
    "ops",
    "optimizers",
    "preprocessing",
    "regularizers",
    "utils",
)


def _register():
    sys.modules.setdefault(keras.__name__, keras)
    for name in SUBMODULES:
        sys.modules.setdefault(f"{keras.__name__}.{name}", getattr(keras, name))


_register()
