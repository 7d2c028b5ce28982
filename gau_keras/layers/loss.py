"""bert4keras's ``Loss`` layer: a loss written as a layer over several tensors.

A subclass overrides ``compute_loss(inputs, mask=None)``; the layer adds the
returned scalar with ``add_loss`` and passes (some of) its inputs through, so
a model compiled with ``model.compile(optimizer=...)`` and no ``loss`` trains
on it. ``self.add_metric(value, name=...)`` works inside ``compute_loss`` as
in Keras 2 (Keras 3 layers removed it): each name gets a ``keras.metrics.Mean``
owned by the layer, reported in ``model.fit``'s logs and history under that
name and reset with the model's other metrics. The trackers are made when the
layer is first called on symbolic tensors (building a functional model, as
every bert4keras script does), so under a distribution strategy that call
belongs inside ``strategy.scope()``, with the rest of the model; a layer first
called on real tensors makes them on that call and drops that first value.

On JAX the values are noted during the call and added when a model of the
bert4keras face computes its loss (``gau_keras.bert4keras.jax_training``: the
``Model`` of ``gau_keras.backend.keras``, ``build_transformer_model``'s): the same
logs as on TensorFlow. A plain ``keras.Model`` on JAX has nowhere to put them:
they are dropped, with a warning.

The layer has no ``compute_output_shape`` on purpose: Keras then infers the
output by running ``call`` on the symbolic inputs, which is when
``compute_loss`` names its metrics.
"""

import warnings

import keras

from gau_keras.registration import PACKAGE


class _MetricBook:
    """The layer's ``add_metric`` trackers by name.

    A plain object, so that Keras's attribute tracking (locked once the layer
    is built) does not see trackers made after build; the layer lists them
    itself in ``metrics``. Names met while building the functional model
    (symbolic inputs) are only noted there, and their trackers made once that
    call has returned: made inside it, in Keras's scratch graph, their
    variables break under a distribution strategy."""

    def __init__(self):
        self.trackers = {}
        self.pending = []
        self.symbolic = False
        self.deferred = []  # JAX: this call's (tracker, value), applied in compute_loss
        self.warned = False  # JAX: told once that a plain keras.Model drops them

    def flush(self):
        for tracker, value in self.deferred:
            tracker.update_state(value)
        self.deferred = []

    def make_pending(self):
        for name in self.pending:
            if name not in self.trackers:
                self.trackers[name] = keras.metrics.Mean(name=name)
        self.pending = []


@keras.saving.register_keras_serializable(package=PACKAGE)
class Loss(keras.layers.Layer):
    """Base class of a loss computed inside the model.

    ``output_axis``: None returns ``inputs`` unchanged, an int returns
    ``inputs[output_axis]``, a list of ints the list of those inputs. Masks
    follow the same selection. ``mask`` given to ``compute_loss`` is a list
    with one entry per input (None where that input has no mask), or None when
    no input has one, as Keras 2 passed it.
    """

    #: read by the bert4keras face's models (``gau_keras.bert4keras.jax_training``): on JAX they add
    #: the values ``add_metric`` noted when they compute the loss
    _gau_keras_defers_metrics = True

    def __init__(self, output_axis=None, **kwargs):
        super().__init__(**kwargs)
        if not (output_axis is None or isinstance(output_axis, (int, list, tuple))):
            raise ValueError(f"Loss: output_axis must be None, an int or a list of ints, got {output_axis!r}")
        self.output_axis = list(output_axis) if isinstance(output_axis, tuple) else output_axis
        self.supports_masking = True
        self._metric_book = _MetricBook()

    def build(self, input_shape):
        self.built = True

    def __call__(self, *args, **kwargs):
        book = self._metric_book
        book.symbolic = any(isinstance(x, keras.KerasTensor) for x in keras.tree.flatten((args, kwargs)))
        try:
            return super().__call__(*args, **kwargs)
        finally:
            book.symbolic = False
            book.make_pending()

    def call(self, inputs, mask=None):
        self._metric_book.deferred = []  # a forward pass that no loss followed (predict) left them
        if mask is not None and all(m is None for m in keras.tree.flatten(mask)):
            mask = None
        self.add_loss(self.compute_loss(inputs, mask))
        return self._select(inputs)

    def compute_loss(self, inputs, mask=None):
        """The scalar loss of ``inputs`` (override it)."""
        raise NotImplementedError(f"{type(self).__name__}: subclasses of Loss must define compute_loss")

    def _select(self, items):
        if self.output_axis is None:
            return items
        if isinstance(self.output_axis, list):
            return [items[i] for i in self.output_axis]
        return items[self.output_axis]

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        return self._select(mask)

    def add_metric(self, value, name=None, aggregation="mean"):
        """Averages ``value`` (a tensor) over the batches of an epoch under ``name``.

        Keras 2's layer API; only ``aggregation='mean'`` exists, as there."""
        if aggregation not in ("mean", None):
            raise ValueError(f"{self.name}.add_metric: aggregation must be 'mean', got {aggregation!r}")
        if not name:
            raise ValueError(f"{self.name}.add_metric: a metric needs a name")
        book = self._metric_book
        if book.symbolic or name not in book.trackers:
            book.pending.append(name)  # the tracker is made when this call returns
            return
        if keras.backend.backend() == "jax":
            if not getattr(self, "_gau_keras_in_face_model", False) and not book.warned:
                book.warned = True
                warnings.warn(
                    f"{self.name}.add_metric({name!r}) on JAX: only a model of the bert4keras face "
                    "(gau_keras.backend.keras.models.Model, build_transformer_model's) adds it to the "
                    "logs; a plain keras.Model drops it",
                    UserWarning,
                    stacklevel=2,
                )
            book.deferred.append((book.trackers[name], value))
        else:
            book.trackers[name].update_state(value)

    @property
    def metrics(self):
        return super().metrics + list(self._metric_book.trackers.values())

    def get_config(self):
        config = super().get_config()
        config.update(output_axis=self.output_axis)
        return config
