"""The base of gau_keras's bert4keras-style optimizers: update hooks and slots.

bert4keras builds its optimizer extensions by temporarily replacing
``K.update`` while the wrapped optimizer computes its step, so that every
assignment the inner optimizer makes can be rewritten. `HookedOptimizer` gives
that mechanism a scoped, per-instance form:

* optimizers write every assignment of one step as
  ``new = self._update(variable, new)``;
* an extension wraps the inner step in ``with self._intercepting(hook):``,
  where ``hook(variable, new) -> new``. Hooks run innermost first (the
  extension applied last to the class rewrites last), as the nested
  ``K.update`` replacements do in bert4keras;
* ``self._decayed_lr(dtype)`` is the learning rate of the current step, which
  learning-rate extensions override.

Each step runs through ``_apply_dense(gradient, variable)``; sparse
(IndexedSlices) gradients are densified first, repeated rows summed.
"""

import contextlib
import math
import re

import keras
import numpy as np
from keras import ops

__all__ = ["HookedOptimizer", "compile_patterns", "variable_path"]


def checked_number(owner, name, value, low=None, high=None):
    """``value`` as a float, or a ValueError (TypeError for a non-number) naming ``name`` when it
    is not a finite number within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{owner}: {name} must be a number, got {type(value).__name__} {value!r:.40}")
    value = float(value)
    if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
        bounds = f"in [{low}, {high}]" if high is not None else f">= {low}" if low is not None else ""
        raise ValueError(f"{owner}: {name} must be a finite number {bounds}, got {value!r}")
    return value


def compile_patterns(patterns, argument):
    """Validates a list of regex strings; returns it as a list of compiled regexes."""
    if patterns is None:
        return []
    if isinstance(patterns, str):
        raise TypeError(f"`{argument}` must be a list of patterns, got the string {patterns!r}")
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except (re.error, TypeError) as error:
            raise ValueError(f"`{argument}` has an invalid pattern {pattern!r}: {error}") from None
    return compiled


def variable_path(variable):
    """The name patterns are matched against: the Keras 3 `path` ("layer/kernel")."""
    return getattr(variable, "path", None) or variable.name


def _inside_strategy():
    """True inside a tf.distribute strategy (scope or replica function)."""
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf  # only the TF backend has strategies

    return tf.distribute.has_strategy()


def _densify(gradient, variable):
    """A dense gradient; IndexedSlices rows are scattered, repeated rows summed."""
    if hasattr(gradient, "indices"):
        return ops.add(ops.zeros(variable.shape, variable.dtype), ops.cast(gradient, variable.dtype))
    return ops.cast(gradient, variable.dtype)


class _HookStack:
    """A plain holder (not a list attribute) so that TF's checkpoint tracking ignores it."""

    def __init__(self):
        self.hooks = []


class HookedOptimizer(keras.optimizers.Optimizer):
    """Base class: `_update` / `_intercepting` hooks, named slots, path patterns.

    Subclasses implement `_apply_dense(gradient, variable)` and create their
    per-variable state in `_create_slots(var_list)` with `_add_slots`.
    """

    def __init__(self, learning_rate=0.001, name=None, **kwargs):
        if isinstance(learning_rate, (bool, str, bytes)) or learning_rate is None:
            raise TypeError(
                f"{type(self).__name__}: learning_rate must be a number or a schedule, "
                f"got {type(learning_rate).__name__} {learning_rate!r:.40}"
            )
        if isinstance(learning_rate, (int, float, np.integer, np.floating)):
            checked_number(type(self).__name__, "learning_rate", learning_rate, low=0)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self._hook_stack = _HookStack()
        self._accumulate_in_update_step = False

    # -- variables ---------------------------------------------------------
    def build(self, var_list):
        """Creates the slots of every variable (once)."""
        if self.built:
            return
        super().build(var_list)
        self._paths = [variable_path(v) for v in var_list]
        self._create_slots(var_list)

    def _create_slots(self, var_list):
        """Adds the per-variable optimizer state; extensions call super() first."""

    def _add_slots(self, attribute, var_list, name, initializer="zeros"):
        """One zero-initialised optimizer variable per model variable, as `self.<attribute>`."""
        setattr(self, attribute, self.add_optimizer_variables(var_list, name, initializer=initializer))

    def _slot(self, attribute, variable):
        return getattr(self, attribute)[self._get_variable_index(variable)]

    def _path(self, variable):
        """The path of a model variable (also for the raw tf.Variable update_step sees)."""
        return self._paths[self._get_variable_index(variable)]

    def _matches(self, variable, patterns):
        """True when a compiled regex of `patterns` is found in the variable's path."""
        path = self._path(variable)
        return any(p.search(path) for p in patterns)

    # -- update hooks --------------------------------------------------------
    def _update(self, variable, value):
        """Assigns `value` (after every active hook) to `variable`; returns what was assigned."""
        for hook in reversed(self._hook_stack.hooks):
            value = hook(variable, value)
        self.assign(variable, value)
        return value

    @contextlib.contextmanager
    def _intercepting(self, hook):
        """Makes `hook(variable, new) -> new` rewrite the assignments made inside the block."""
        self._hook_stack.hooks.append(hook)
        try:
            yield
        finally:
            self._hook_stack.hooks.pop()

    # -- learning rate -------------------------------------------------------
    def _get_current_learning_rate(self):
        # Schedules see the update count (`iterations` divides by Keras's
        # gradient_accumulation_steps); Keras's base passes the micro-step count.
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def _decayed_lr(self, dtype):
        """The learning rate of this step; learning-rate extensions override it."""
        return ops.cast(self._get_current_learning_rate(), dtype)

    # -- the step ------------------------------------------------------------
    def _apply_dense(self, gradient, variable):
        raise NotImplementedError(f"{type(self).__name__} must implement `_apply_dense`")

    def update_step(self, gradient, variable, learning_rate):
        """One step for one variable, or one Keras accumulation micro-step (see below)."""
        gradient = _densify(gradient, variable)
        if not self._accumulate_in_update_step:
            return self._apply_dense(gradient, variable)
        steps = self.gradient_accumulation_steps
        accumulator = self._accumulated_gradients[self._get_variable_index(variable)]
        total = accumulator + gradient

        def step():
            self._apply_dense(total / steps, variable)
            self.assign(accumulator, ops.zeros_like(total))

        ops.cond(ops.equal((self._iterations + 1) % steps, 0), step, lambda: self.assign(accumulator, total))

    def _backend_apply_gradients(self, grads, trainable_variables):
        """Keras's flow, except Keras's accumulation inside a tf.distribute strategy.

        Keras wraps the whole update, gradient all-reduce included, in a
        `cond` on "is this an update step", which a strategy's cross-replica
        merge cannot run in. Here the all-reduce runs at every micro-step and
        the `cond` moves into each variable's own update (`update_step`).
        """
        if not (self.gradient_accumulation_steps and _inside_strategy()):
            return super()._backend_apply_gradients(grads, trainable_variables)
        if self.clipnorm or self.clipvalue or self.global_clipnorm or self.use_ema:
            raise ValueError(
                f"{type(self).__name__}: gradient clipping and EMA are not supported together "
                "with gradient_accumulation_steps inside a tf.distribute strategy"
            )
        self._accumulate_in_update_step = True
        try:
            self._backend_update_step(grads, trainable_variables, self.learning_rate)
        finally:
            self._accumulate_in_update_step = False

    # -- serialisation -------------------------------------------------------
    def get_config(self):
        config = super().get_config()
        spec = type(self).__dict__.get("_extension_spec")
        if spec is not None:  # a class made by an extend_with_* factory: how to remake it
            config["extended_from"] = {"base": spec[0], "extensions": [list(e) for e in spec[1]]}
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        config.pop("extended_from", None)
        return super().from_config(config, custom_objects=custom_objects)
