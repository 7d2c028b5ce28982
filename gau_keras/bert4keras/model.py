"""The Keras 2 face of a model: ``Keras2Mixin`` gives a Keras 3 model the calls bert4keras-era
(Keras 2) code makes; the core's models (``Backbone``, ``Transformer.build``) are plain ``keras.Model``s.

The face reaches a model through bert4keras's entry points only: ``build_transformer_model``
returns its model with the mixin applied (``keras2``), ``gau_keras.backend.keras.models.Model``
(``Model`` below, the ``Model`` a bert4keras script imports) is a functional model with it, and
``gau_keras.backend.keras.models.load_model`` applies it to what it loads. ``keras.Model`` and
Keras's tables are not changed. Over Keras 3 the mixin adds:

* ``fit_generator``, ``evaluate_generator``, ``predict_generator``: Keras 2's
  signatures, run by ``fit`` / ``evaluate`` / ``predict`` on the same data;
* nested Python lists as data (``model.predict([[token_ids], [segment_ids]])``)
  in ``fit``, ``evaluate``, ``predict`` and the ``*_on_batch`` calls;
* ``y_true`` cast to the output's dtype before a compiled loss or metric sees
  it (Keras 2's ``match_dtype_and_rank``: a float64 target meets a float32
  output as float32, an int64 one an int32 output as int32);
* plain metric functions compiled as Keras 2 compiled them (``Keras2FunctionMetric``);
* the ids and lengths of array inputs checked against the model's embedding
  and position tables (``gau_keras.input_checks``): an error naming the input,
  not NaN on JAX or a negative id reading the table from its end;
* ``save`` and ``save_weights`` under any name (``'best_model.model'``,
  ``'x.h5'``, ``'best_model.weights'``): Keras 3's formats, written
  atomically, and ``load_weights`` that reads them back (and Keras 2's HDF5
  weight files) (``gau_keras.bert4keras.saving``);
* on JAX, ``Loss.add_metric`` and the CRF / MEMM accuracies, which read the
  transition weights (``gau_keras.bert4keras.jax_training``);
* Keras 2's training-function internals (``_make_train_function``,
  ``total_loss``, assigning ``train_function``) raise an error naming the
  README's porting section, instead of being silently ignored.
"""

import types
import warnings

import keras
import numpy as np
from keras import ops
from keras.src.backend import get_keras_mask  # Keras's own reader of a tensor's mask
from keras.src.losses.loss import apply_mask  # the mask folded into a sample weight, as Keras's metrics do
from keras.src.models.functional import Functional  # the class of keras.Model(inputs, outputs)
from keras.src.utils.naming import get_object_name  # the name Keras's compile gives a function metric

import gau_keras.models  # noqa: F401  (registers every Backbone: their face classes are made below)
from gau_keras import input_checks
from gau_keras.bert4keras import PORTING, jax_training, nodes, saving
from gau_keras.models import builder
from gau_keras.models.registry import BACKBONES
from gau_keras.registration import PACKAGE
from gau_keras.snippets import data_generator

__all__ = ["Keras2Mixin", "Model", "keras2", "keras2_class", "as_arrays"]

#: Keras 2 generator-method arguments that Keras 3 takes from a ``keras.utils.PyDataset`` instead
_QUEUE_DEFAULTS = {"max_queue_size": 10, "workers": 1, "use_multiprocessing": False}


#: what Keras 2 read as one number of inline data: Python's and numpy's scalars (np.int64 from argmax ...)
_SCALARS = (int, float, bool, np.generic)


def _is_nested_list(x):
    """A Python list/tuple of inline data: numbers (numpy scalars too), arrays or further such lists."""
    if not isinstance(x, (list, tuple)):
        return False
    return all(isinstance(item, _SCALARS + (np.ndarray,)) or _is_nested_list(item) for item in x)


def as_arrays(x, n_inputs):
    """Keras 2's reading of nested Python lists: with several inputs, a list with one
    entry per input has each nested-list entry made an array; with one input, a
    nested list is one array. Anything else is returned as it is."""
    if x is None or isinstance(x, dict):
        return x
    if n_inputs > 1 and isinstance(x, (list, tuple)) and len(x) == n_inputs:
        return [np.asarray(item) if _is_nested_list(item) else item for item in x]
    if n_inputs == 1 and _is_nested_list(x) and x and all(isinstance(item, (list, tuple)) for item in x):
        return np.asarray(x)
    return x


def _stream(x, convert):
    """A Python generator as Keras 3's fit/evaluate/predict read it (its batches' lists as tuples,
    as ``DataGenerator.forfit`` gives them); other data unchanged."""
    if isinstance(x, types.GeneratorType):
        return data_generator._keras_batches(x, convert)
    return x


def _predict_batch(batch):
    """Keras 2's predict_generator: a tuple is (inputs, targets[, weights]) and only its inputs
    are used; anything else (a list of input arrays, one array) is the inputs."""
    inputs = batch[0] if isinstance(batch, tuple) and len(batch) in (2, 3) else batch
    return data_generator._as_predict_batch(inputs)


def _same_kind(a, b):
    floating = lambda t: "float" in keras.backend.standardize_dtype(t.dtype)  # noqa: E731
    integer = lambda t: "int" in keras.backend.standardize_dtype(t.dtype)  # noqa: E731
    return (floating(a) and floating(b)) or (integer(a) and integer(b))


def _cast_like(y, y_pred):
    """y cast to y_pred's dtype where both are floating or both integer (structures matched)."""
    if isinstance(y, dict) and isinstance(y_pred, dict):
        return {k: _cast_like(v, y_pred[k]) if k in y_pred else v for k, v in y.items()}
    if isinstance(y, (list, tuple)) and isinstance(y_pred, (list, tuple)):
        if len(y) != len(y_pred):
            return y
        return type(y)(_cast_like(a, b) for a, b in zip(y, y_pred))
    if y is None or not hasattr(y, "dtype") or not hasattr(y_pred, "dtype"):
        return y
    return ops.cast(y, y_pred.dtype) if _same_kind(y, y_pred) and y.dtype != y_pred.dtype else y


def _warn_queue_arguments(method, given):
    ignored = {k: v for k, v in given.items() if v != _QUEUE_DEFAULTS[k]}
    if ignored:
        warnings.warn(
            f"{method}: {ignored} not used: Keras 3 reads workers and queues from a "
            f"keras.utils.PyDataset, not from the call ({PORTING})",
            UserWarning,
            stacklevel=3,
        )


class Keras2Only(AttributeError, NotImplementedError):
    """A Keras 2 attribute that Keras 3 has no form of (``hasattr`` answers False)."""


@keras.saving.register_keras_serializable(package=PACKAGE)
class Keras2FunctionMetric(keras.metrics.MeanMetricWrapper):
    """A metric function as Keras 2 compiled it: the mean of its values, weighted by the
    output's mask (and the sample weights); a function that reduces to a number itself
    (``K.sum(loss * mask) / K.sum(mask)``) counts with the total of those weights, as Keras 2
    counted it, where Keras 3 would spread the [B, L] mask over that number and fail."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        values = self._fn(y_true, y_pred, **self._fn_kwargs)
        sample_weight = apply_mask(sample_weight, get_keras_mask(y_pred), dtype=self.dtype, reduction="sum")
        if len(values.shape) == 0 and sample_weight is not None:
            sample_weight = ops.sum(sample_weight)
        return keras.metrics.Mean.update_state(self, values, sample_weight=sample_weight)


def _keras2_metrics(metrics):
    """``metrics`` (a list, a dict of lists, nested) with plain functions wrapped in
    ``Keras2FunctionMetric`` under their own names; names and Metric objects unchanged."""
    if isinstance(metrics, dict):
        return {key: _keras2_metrics(value) for key, value in metrics.items()}
    if isinstance(metrics, (list, tuple)):
        return type(metrics)(_keras2_metrics(m) for m in metrics)
    if callable(metrics) and not isinstance(metrics, (keras.metrics.Metric, type)):
        return Keras2FunctionMetric(metrics, name=get_object_name(metrics))
    return metrics


class Keras2Mixin:
    """Keras 2's calls (module docstring) for a ``keras.Model`` subclass: put it first among the
    bases (``keras2_class``), or apply it to a built model (``keras2``)."""

    # ------------------------------------------------------------ data
    def _n_inputs(self):
        inputs = getattr(self, "inputs", None)
        return len(inputs) if isinstance(inputs, (list, tuple)) else 1

    def _n_outputs(self):
        outputs = getattr(self, "outputs", None)
        return len(outputs) if isinstance(outputs, (list, tuple)) else 1

    def _arrays(self, x, where):
        """``x`` with nested lists made arrays (``as_arrays``), its ids and lengths checked
        against the model's tables (``gau_keras.input_checks``)."""
        x = as_arrays(x, self._n_inputs())
        input_checks.check_inputs(self, x, where)
        return x

    def fit(self, x=None, y=None, *args, **kwargs):
        x = _stream(self._arrays(x, "fit"), data_generator._as_fit_batch)
        if "validation_data" in kwargs:
            kwargs["validation_data"] = _stream(kwargs["validation_data"], data_generator._as_fit_batch)
        return super().fit(x, as_arrays(y, self._n_outputs()), *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        x = _stream(self._arrays(x, "evaluate"), data_generator._as_fit_batch)
        return super().evaluate(x, as_arrays(y, self._n_outputs()), *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        x = _stream(self._arrays(x, "predict"), _predict_batch)
        return super().predict(x, *args, **kwargs)

    def train_on_batch(self, x, y=None, *args, **kwargs):
        x, y = self._arrays(x, "train_on_batch"), as_arrays(y, self._n_outputs())
        return super().train_on_batch(x, y, *args, **kwargs)

    def test_on_batch(self, x, y=None, *args, **kwargs):
        x, y = self._arrays(x, "test_on_batch"), as_arrays(y, self._n_outputs())
        return super().test_on_batch(x, y, *args, **kwargs)

    def predict_on_batch(self, x):
        return super().predict_on_batch(self._arrays(x, "predict_on_batch"))

    # ------------------------------------------------------------ Keras 2's generator methods
    def fit_generator(
        self,
        generator,
        steps_per_epoch=None,
        epochs=1,
        verbose=1,
        callbacks=None,
        validation_data=None,
        validation_steps=None,
        validation_freq=1,
        class_weight=None,
        max_queue_size=10,
        workers=1,
        use_multiprocessing=False,
        shuffle=True,
        initial_epoch=0,
    ):
        """Keras 2's ``fit_generator``: ``fit`` on the generator (``shuffle`` has no
        meaning for a generator, as in Keras 2)."""
        _warn_queue_arguments(
            "fit_generator",
            dict(max_queue_size=max_queue_size, workers=workers, use_multiprocessing=use_multiprocessing),
        )
        return self.fit(
            generator,
            steps_per_epoch=steps_per_epoch,
            epochs=epochs,
            verbose=verbose,
            callbacks=callbacks,
            validation_data=validation_data,
            validation_steps=validation_steps,
            validation_freq=validation_freq,
            class_weight=class_weight,
            initial_epoch=initial_epoch,
        )

    def evaluate_generator(
        self, generator, steps=None, callbacks=None, max_queue_size=10, workers=1, use_multiprocessing=False, verbose=0
    ):
        """Keras 2's ``evaluate_generator``: ``evaluate`` on the generator."""
        _warn_queue_arguments(
            "evaluate_generator",
            dict(max_queue_size=max_queue_size, workers=workers, use_multiprocessing=use_multiprocessing),
        )
        return self.evaluate(generator, steps=steps, callbacks=callbacks, verbose=verbose)

    def predict_generator(
        self, generator, steps=None, callbacks=None, max_queue_size=10, workers=1, use_multiprocessing=False, verbose=0
    ):
        """Keras 2's ``predict_generator``: ``predict`` on the generator (it yields inputs,
        or (inputs, targets) pairs whose targets are ignored)."""
        _warn_queue_arguments(
            "predict_generator",
            dict(max_queue_size=max_queue_size, workers=workers, use_multiprocessing=use_multiprocessing),
        )
        return self.predict(generator, steps=steps, callbacks=callbacks, verbose=verbose)

    # ------------------------------------------------------------ losses
    def compile(self, *args, metrics=None, weighted_metrics=None, **kwargs):
        """Keras 3's ``compile``; a plain function among the metrics runs as Keras 2 ran it
        (``Keras2FunctionMetric``: one that already reduces to a number is averaged as it is)."""
        return super().compile(
            *args, metrics=_keras2_metrics(metrics), weighted_metrics=_keras2_metrics(weighted_metrics), **kwargs
        )

    def compile_from_config(self, config):
        """What Keras's ``compile_from_config`` does (it skips models that override ``compile``):
        compile with the saved arguments, then create the optimizer's variables."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(self.trainable_variables)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras's ``compute_loss`` on ``y`` cast to the output's dtype; on JAX the Loss layers'
        ``add_metric`` values of this step are added first (``jax_training``)."""
        jax_training.flush_layer_metrics(self)
        return super().compute_loss(
            x=x, y=_cast_like(y, y_pred), y_pred=y_pred, sample_weight=sample_weight, training=training
        )

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """Keras's ``compute_metrics`` on ``y`` cast as for the loss (a float64 target from
        ``sequence_padding`` meets a float32 metric function as float32, as in Keras 2); on JAX
        with the step's weights mapped for the metrics that read them (``jax_training``)."""
        jax_training.map_step_weights(self)
        return super().compute_metrics(x, _cast_like(y, y_pred), y_pred, sample_weight=sample_weight)

    if keras.backend.backend() == "jax":  # JAX's steps take the state; TensorFlow's read the variables

        def train_step(self, state, data):
            with jax_training.step_weights_noted(self, state):
                return super().train_step(state, data)

        def test_step(self, state, data):
            with jax_training.step_weights_noted(self, state):
                return super().test_step(state, data)

        def predict_step(self, state, data):
            with jax_training.step_weights_noted(self, state):
                return super().predict_step(state, data)

    # ------------------------------------------------------------ saving
    def save(self, filepath, overwrite=True, include_optimizer=True, save_format=None, **kwargs):
        """Saves the whole model in the Keras format under any name (Keras 3 takes only
        '.keras'): 'best_model.model' and 'x.h5' too, written atomically. Keras 2's
        ``include_optimizer=False`` saves without the optimizer; ``save_format``
        other than 'keras' is answered with a warning (there is one format)."""
        saving.save_model(
            self, filepath, overwrite=overwrite, include_optimizer=include_optimizer, save_format=save_format, **kwargs
        )

    def save_weights(self, filepath, overwrite=True, save_format=None, **kwargs):
        """Keras 3's weights format under any name (bert4keras's 'best_model.weights' too),
        written atomically; ``save_format`` other than 'h5' is answered with a warning."""
        saving.save_weights(self, filepath, overwrite=overwrite, save_format=save_format, **kwargs)

    def load_weights(self, filepath, skip_mismatch=False, by_name=False, **kwargs):
        """Reads what ``save_weights`` wrote, whatever the name, and Keras 2's HDF5 weight files."""
        return saving.load_weights(self, filepath, skip_mismatch=skip_mismatch, by_name=by_name, **kwargs)

    # ------------------------------------------------------------ what has no Keras 3 form
    def _make_train_function(self):
        raise NotImplementedError(
            "model._make_train_function() and replacing model.train_function (Keras 2) have no Keras 3 form: "
            f"write a train_step on a keras.Model subclass instead ({PORTING}, 'Patching the training function')"
        )

    @property
    def total_loss(self):
        raise Keras2Only(
            "model.total_loss (a Keras 2 graph tensor) has no Keras 3 form: the loss is computed inside each "
            f"step; write a train_step on a keras.Model subclass ({PORTING}, 'Patching the training function')"
        )

    def __setattr__(self, name, value):
        if name == "train_function" and value is not None and _is_user_function(value):
            raise NotImplementedError(
                "assigning model.train_function (Keras 2) would be ignored by Keras 3's fit: write a train_step "
                f"on a keras.Model subclass instead ({PORTING}, 'Patching the training function')"
            )
        super().__setattr__(name, value)


def _is_user_function(value):
    """Whether a train_function being assigned comes from outside Keras (a user's replacement):
    Keras's own are made in keras.src (or wrapped by tf.function / jax.jit)."""
    module = getattr(value, "__module__", None) or ""
    wrapped = getattr(value, "__wrapped__", None) or getattr(value, "python_function", None)
    if wrapped is not None:
        module = getattr(wrapped, "__module__", module) or module
    return not (module.startswith("keras") or module.startswith("tensorflow") or module.startswith("jax"))


@keras.saving.register_keras_serializable(package=PACKAGE)
class Model(Keras2Mixin, Functional):
    """A functional ``keras.Model`` with Keras 2's calls (module docstring), the
    ``keras.models.Model`` of ``gau_keras.backend.keras``: ``Model(inputs, outputs, name=...)``."""


#: the face class of each model class (``keras2_class``)
_FACES = {Functional: Model, Model: Model}


def keras2_class(cls):
    """The face class of model class ``cls``: ``cls`` with ``Keras2Mixin`` first, of the same
    name, registered for ``.keras`` files as ``gau_keras>Keras2<name>`` (a plain functional
    model's is ``Model``)."""
    if issubclass(cls, Keras2Mixin):
        return cls
    if cls not in _FACES:
        face = type(
            cls.__name__,
            (Keras2Mixin, cls),
            {
                "__module__": __name__,
                "__qualname__": cls.__qualname__,
                "__doc__": f"{cls.__name__} with Keras 2's calls.",
            },
        )
        _FACES[cls] = keras.saving.register_keras_serializable(package=PACKAGE, name=f"Keras2{cls.__name__}")(face)
    return _FACES[cls]


def keras2(model):
    """``model`` (a built ``keras.Model``) with Keras 2's calls: the same object, its class
    made its face class (``keras2_class``); a model that has them is returned as it is."""
    if not isinstance(model, keras.Model):
        raise TypeError(f"keras2: model must be a keras.Model, got {type(model).__name__}")
    if not isinstance(model, Keras2Mixin):
        model.__class__ = keras2_class(type(model))
    return model


# every Backbone's face class exists from here on, so that a .keras file of one loads after
# `import gau_keras` (building a model later registers nothing)
for _backbone in BACKBONES.values():
    keras2_class(_backbone)
builder.MODEL_FACES.append(keras2)  # build_transformer_model's model gets Keras 2's calls
nodes.add_to_layer_names()  # bert4keras's layer names get Keras 2's get_output_at & co.
