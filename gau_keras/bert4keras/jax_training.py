"""Keras 2 training behaviours that Keras 3's JAX trainer lacks, for the models that need them.

* **Metrics that read a layer's weights** (bert4keras's CRF / MEMM accuracies read the
  transition weights). Keras's JAX trainer hands the weights to each step as values and
  computes the metrics in a stateless scope that maps only the metrics' variables, so a
  weight read there finds no value. The step notes the weight values it receives and
  ``compute_metrics`` adds them to that scope: the metrics see the weights that computed
  ``y_pred``. (On TensorFlow the metric reads the variables themselves; in ``fit`` that is
  after the step's update, since Keras 3 computes the metrics after applying the gradients.)
* **``Loss.add_metric``**: on JAX the forward pass runs in a stateless scope that maps only
  the model's weights, so a metric updated inside a layer's call has nowhere to go. The
  values noted in the call are added in ``compute_loss``, whose scope also maps the
  metrics' variables (the same values, in the same step, as TensorFlow adds them directly).

Nothing changes on import. ``install()`` is called when such a layer is built on JAX; it
wraps ``keras.Model.train_step``, ``test_step``, ``compute_metrics`` and ``compute_loss``
once, and each wrapper calls Keras's own method unchanged for a model that contains no
such layer (tests/bert4keras/test_compat.py fits a plain model both ways).
"""
import keras
from keras.src.backend.common.stateless_scope import get_stateless_scope  # pinned: docs/architecture.md

_NOTED = "_gau_keras_step_weights"
_INSTALLED = "_gau_keras_compat"

#: a layer class attribute: its metrics read its weights (CRF, MEMM)
READS_WEIGHTS_IN_METRICS = "_gau_keras_metrics_read_weights"
#: a layer class attribute: it collects ``add_metric`` values during its call (Loss)
DEFERS_METRICS = "_gau_keras_defers_metrics"


def _layers_with(model, flag):
    return [layer for layer in model._flatten_layers(include_self=False) if getattr(layer, flag, False)]


def _noting_weights(step):
    """A train/test step that, for a model whose metrics read weights, notes its
    (trainable, non-trainable) weight values for ``compute_metrics``."""

    def wrapped(self, state, data):
        if not _layers_with(self, READS_WEIGHTS_IN_METRICS):
            return step(self, state, data)
        setattr(self, _NOTED, (state[0], state[1]))
        try:
            return step(self, state, data)
        finally:
            setattr(self, _NOTED, None)

    setattr(wrapped, _INSTALLED, step)
    return wrapped


def _with_weights_mapped(compute_metrics):
    def wrapped(self, *args, **kwargs):
        noted, scope = getattr(self, _NOTED, None), get_stateless_scope()
        if noted is not None and scope is not None:
            pairs = zip(self.trainable_variables + self.non_trainable_variables, noted[0] + noted[1])
            for variable, value in pairs:
                scope.state_mapping.setdefault(id(variable), value)
        return compute_metrics(self, *args, **kwargs)

    setattr(wrapped, _INSTALLED, compute_metrics)
    return wrapped


def _flushing_loss_metrics(compute_loss):
    """``Model.compute_loss`` that first adds the Loss layers' deferred ``add_metric`` values."""

    def wrapped(self, *args, **kwargs):
        for layer in _layers_with(self, DEFERS_METRICS):
            layer._metric_book.flush()
        return compute_loss(self, *args, **kwargs)

    setattr(wrapped, _INSTALLED, compute_loss)
    return wrapped


_WRAPPERS = {"train_step": _noting_weights, "test_step": _noting_weights,
             "compute_metrics": _with_weights_mapped, "compute_loss": _flushing_loss_metrics}


def install():
    """Wraps keras.Model's four methods (once; JAX only)."""
    if keras.backend.backend() != "jax":
        return
    for name, wrap in _WRAPPERS.items():
        method = getattr(keras.Model, name)
        if not hasattr(method, _INSTALLED):
            setattr(keras.Model, name, wrap(method))


def installed():
    """Whether ``install()`` has wrapped keras.Model in this process."""
    return all(hasattr(getattr(keras.Model, name), _INSTALLED) for name in _WRAPPERS)
