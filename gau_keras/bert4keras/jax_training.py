"""Keras 2 training behaviours that Keras 3's JAX trainer lacks, for the face's models
(``Keras2Mixin``'s steps, ``compute_loss`` and ``compute_metrics`` call these; nothing else does).

* **Metrics that read a layer's weights** (bert4keras's CRF / MEMM accuracies read the
  transition weights; such a layer class sets ``READS_WEIGHTS_IN_METRICS``). Keras's JAX
  trainer hands the weights to each step as values and computes the metrics in a stateless
  scope that maps only the metrics' variables, so a weight read there finds no value. The
  step notes the weight values it receives and ``compute_metrics`` adds them to that scope:
  the metrics see the weights that computed ``y_pred``. (On TensorFlow the metric reads the
  variables themselves; in ``fit`` that is after the step's update, since Keras 3 computes
  the metrics after applying the gradients.)
* **``Loss.add_metric``** (a layer class that sets ``DEFERS_METRICS``): on JAX the forward
  pass runs in a stateless scope that maps only the model's weights, so a metric updated
  inside a layer's call has nowhere to go. The values noted in the call are added in
  ``compute_loss``, whose scope also maps the metrics' variables (the same values, in the
  same step, as TensorFlow adds them directly).

A plain ``keras.Model`` has Keras 3's semantics: on JAX, a metric that reads a weight (the
MEMM accuracy; the CRF accuracy reads none) raises an error naming the face's ``Model``
when Keras left the weight without a value there, and a ``Loss`` layer's ``add_metric``
values are dropped with a warning; on TensorFlow both work as in the face.
"""

import contextlib

import keras
from keras.src.backend.common.stateless_scope import get_stateless_scope  # pinned: docs/architecture.md

_NOTED = "_gau_keras_step_weights"

#: a layer class attribute: its metrics read its weights (CRF, MEMM)
READS_WEIGHTS_IN_METRICS = "_gau_keras_metrics_read_weights"
#: a layer class attribute: it collects ``add_metric`` values during its call (Loss)
DEFERS_METRICS = "_gau_keras_defers_metrics"
#: a layer instance attribute the face sets: a model of the face runs its steps (``True``)
IN_FACE_MODEL = "_gau_keras_in_face_model"

_JAX = keras.backend.backend() == "jax"


def _layers_with(model, flag):
    return [layer for layer in model._flatten_layers(include_self=False) if getattr(layer, flag, False)]


@contextlib.contextmanager
def step_weights_noted(model, state):
    """Within a JAX train/test/predict step of ``model``: its (trainable, non-trainable) weight
    values noted for ``map_step_weights``, and its CRF / MEMM / Loss layers told that a model of
    the face runs them."""
    flagged = _layers_with(model, READS_WEIGHTS_IN_METRICS) + _layers_with(model, DEFERS_METRICS)
    for layer in flagged:
        setattr(layer, IN_FACE_MODEL, True)
    if not _layers_with(model, READS_WEIGHTS_IN_METRICS):
        yield
        return
    setattr(model, _NOTED, (state[0], state[1]))
    try:
        yield
    finally:
        setattr(model, _NOTED, None)


def map_step_weights(model):
    """In ``compute_metrics``'s stateless scope (JAX): the weight values the step noted, for the
    metrics that read weights."""
    noted, scope = getattr(model, _NOTED, None), get_stateless_scope()
    if noted is None or scope is None:
        return
    pairs = zip(model.trainable_variables + model.non_trainable_variables, noted[0] + noted[1])
    for variable, value in pairs:
        scope.state_mapping.setdefault(id(variable), value)


def flush_layer_metrics(model):
    """In ``compute_loss`` (JAX): adds the Loss layers' deferred ``add_metric`` values."""
    if not _JAX:
        return
    for layer in _layers_with(model, DEFERS_METRICS):
        layer._metric_book.flush()
