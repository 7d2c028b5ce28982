"""Metrics that read a layer's weights, under Keras's JAX ``fit`` and ``evaluate``.

bert4keras's MaximumEntropyMarkovModel computes its accuracy from its
transition weights. Keras's JAX trainer hands the weights to each step as
values and computes the metrics in a stateless scope that maps only the
metrics' variables, so a weight read there finds no value. The train and
test steps below note the weight values they receive, and ``compute_metrics``
adds them to that scope: the metrics see the weights that computed
``y_pred``. (On TensorFlow the metric reads the variables themselves; in
``fit`` that is after the step's update, since Keras 3 computes the metrics
after applying the gradients.)

Applied on the JAX backend only, when ``gau_keras.layers`` is imported.
"""
import keras
from keras.src.backend.common.stateless_scope import get_stateless_scope  # not in Keras 3's public API

_NOTED = "_gau_keras_step_weights"


def _noting_weights(step):
    """A train/test step that notes its (trainable, non-trainable) weight values
    for ``compute_metrics`` (the first two items of the step's state)."""

    def wrapped(self, state, data):
        setattr(self, _NOTED, (state[0], state[1]))
        try:
            return step(self, state, data)
        finally:
            setattr(self, _NOTED, None)

    wrapped._gau_keras_weight_metrics = True
    return wrapped


def _with_weights_mapped(compute_metrics):
    def wrapped(self, *args, **kwargs):
        noted, scope = getattr(self, _NOTED, None), get_stateless_scope()
        if noted is not None and scope is not None:
            pairs = zip(self.trainable_variables + self.non_trainable_variables, noted[0] + noted[1])
            for variable, value in pairs:
                scope.state_mapping.setdefault(id(variable), value)
        return compute_metrics(self, *args, **kwargs)

    wrapped._gau_keras_weight_metrics = True
    return wrapped


if keras.backend.backend() == "jax" and not getattr(keras.Model.compute_metrics, "_gau_keras_weight_metrics", False):
    keras.Model.train_step = _noting_weights(keras.Model.train_step)
    keras.Model.test_step = _noting_weights(keras.Model.test_step)
    keras.Model.compute_metrics = _with_weights_mapped(keras.Model.compute_metrics)
