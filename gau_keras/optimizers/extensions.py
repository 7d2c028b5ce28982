"""bert4keras's optimizer extensions: ``extend_with_*(BaseOptimizer, name=None)``.

Each factory returns a subclass of ``BaseOptimizer`` (any gau_keras optimizer,
extended or not, so they compose in any order) that takes its extra keyword
arguments with bert4keras 0.11.5's names and defaults. Most of them rewrite
the assignments the inner optimizer makes (`HookedOptimizer._intercepting`),
as bert4keras's replace ``K.update``; the order of application matters exactly
as there (e.g. weight decay inside layer adaptation is LAMB).

Name patterns (``exclude_from_weight_decay``, ``exclude_from_layer_adaptation``,
``include_in_lazy_optimization``: regexes; ``paramwise_lr_schedule``: plain
substrings) are matched against the Keras 3 variable *path*
("Transformer-0-FeedForward/kernel"), where bert4keras matched TF1 names
("Transformer-0-FeedForward/kernel:0"): Keras 3's `variable.name` is only
the leaf ("kernel"). Patterns anchored on ":0" need rewriting.
"""

import keras
import numpy as np
from keras import ops

from gau_keras.optimizers.base import checked_number, compile_patterns
from gau_keras.optimizers.factory import extension
from gau_keras.optimizers.schedules import PiecewiseLinearDecay

__all__ = [
    "extend_with_weight_decay",
    "extend_with_layer_adaptation",
    "extend_with_piecewise_linear_lr",
    "extend_with_gradient_accumulation",
    "extend_with_lookahead",
    "extend_with_lazy_optimization",
    "extend_with_exponential_moving_average",
    "extend_with_parameter_wise_lr",
]


def _value(x):
    """A variable's current value as a tensor (JAX's ``where`` refuses a Keras Variable itself)."""
    return ops.convert_to_tensor(x)


def _norm(x):
    return ops.sqrt(ops.sum(ops.square(x)))


@extension("weight_decay")
def extend_with_weight_decay(BaseOptimizer):
    """Adds weight decay to the update: w_new ← w_new − lr · weight_decay_rate · w.

    Arguments: ``weight_decay_rate=0.01``, ``exclude_from_weight_decay=[]``
    (regexes on variable paths). The decay joins the update the inner
    optimizer makes, so an outer layer adaptation scales it too (LAMB);
    Keras's own decoupled ``weight_decay`` is refused to avoid two decays.
    """

    class WeightDecay(BaseOptimizer):
        def __init__(self, *args, weight_decay_rate=0.01, exclude_from_weight_decay=None, **kwargs):
            if kwargs.get("weight_decay") is not None:
                raise ValueError(
                    "This optimizer applies weight decay inside its update: pass "
                    f"`weight_decay_rate`, not `weight_decay` (got {kwargs['weight_decay']!r})"
                )
            kwargs.pop("weight_decay", None)
            super().__init__(*args, **kwargs)
            self.weight_decay_rate = checked_number(type(self).__name__, "weight_decay_rate", weight_decay_rate, 0)
            self._decay_patterns = compile_patterns(exclude_from_weight_decay, "exclude_from_weight_decay")
            self._decay_excluded_keys = set()

        def exclude_from_weight_decay(self, var_list=None, var_names=None):
            """Exempts variables (objects, or regex patterns on their path) from the decay.

            Keras's method of the same name configures the decoupled
            `weight_decay` this optimizer refuses; here it acts on ours.
            """
            if self.built:
                raise ValueError("`exclude_from_weight_decay()` must be called before the optimizer is built")
            self._decay_patterns += compile_patterns(var_names, "var_names")
            self._decay_excluded_keys |= {self._var_key(v) for v in var_list or ()}

        def _do_weight_decay(self, variable):
            return self._var_key(variable) not in self._decay_excluded_keys and not self._matches(
                variable, self._decay_patterns
            )

        def _apply_dense(self, gradient, variable):
            if not (self.weight_decay_rate and self._do_weight_decay(variable)):
                return super()._apply_dense(gradient, variable)

            def decay(x, new):
                if x is variable:
                    new = new - self._decayed_lr(variable.dtype) * self.weight_decay_rate * x
                return new

            with self._intercepting(decay):
                super()._apply_dense(gradient, variable)

        def get_config(self):
            config = super().get_config()
            if config.get("weight_decay") is None:
                config.pop("weight_decay", None)
            config.update(
                weight_decay_rate=self.weight_decay_rate,
                exclude_from_weight_decay=[p.pattern for p in self._decay_patterns],
            )
            return config

    return WeightDecay


@extension("layer_adaptation")
def extend_with_layer_adaptation(BaseOptimizer):
    """Adds LAMB's layer-wise trust ratio (https://arxiv.org/abs/1904.00962).

    With Δ = w_new − w the inner update and u = Δ / max(lr, ε) (ε =
    `keras.config.epsilon()`, 1e-7), the update becomes Δ · ‖w‖ / ‖u‖ (ratio 1
    when ‖w‖ or ‖u‖ is 0). Argument: ``exclude_from_layer_adaptation=[]``.
    """

    class LayerAdaptation(BaseOptimizer):
        def __init__(self, *args, exclude_from_layer_adaptation=None, **kwargs):
            super().__init__(*args, **kwargs)
            self._adaptation_patterns = compile_patterns(exclude_from_layer_adaptation, "exclude_from_layer_adaptation")

        def _apply_dense(self, gradient, variable):
            if self._matches(variable, self._adaptation_patterns):
                return super()._apply_dense(gradient, variable)

            def adapt(x, new):
                if x is variable:
                    delta = new - x
                    lr = ops.maximum(self._decayed_lr(variable.dtype), keras.config.epsilon())
                    w_norm, u_norm = _norm(x), _norm(delta / lr)
                    usable = ops.logical_and(ops.greater(w_norm, 0.0), ops.greater(u_norm, 0.0))
                    ratio = ops.where(usable, w_norm / ops.where(usable, u_norm, 1.0), 1.0)
                    new = x + delta * ratio
                return new

            with self._intercepting(adapt):
                super()._apply_dense(gradient, variable)

        def get_config(self):
            config = super().get_config()
            config.update(exclude_from_layer_adaptation=[p.pattern for p in self._adaptation_patterns])
            return config

    return LayerAdaptation


@extension("piecewise_linear_lr")
def extend_with_piecewise_linear_lr(BaseOptimizer):
    """Multiplies the learning rate by s(iterations), piecewise linear through ``lr_schedule``.

    ``lr_schedule={0: 1}`` as in bert4keras: {1000: 1, 2000: 0.1} warms up
    from 0 over 1000 steps, decays to 0.1 at 2000 and stays there. The step
    is `iterations` before the update (micro-steps under
    extend_with_gradient_accumulation, as in bert4keras).
    """

    class PiecewiseLinearLR(BaseOptimizer):
        def __init__(self, *args, lr_schedule=None, **kwargs):
            super().__init__(*args, **kwargs)
            self._lr_multiplier = PiecewiseLinearDecay(1.0, {0: 1} if lr_schedule is None else lr_schedule)
            self.lr_schedule = dict(self._lr_multiplier.schedule)

        def _decayed_lr(self, dtype):
            multiplier = self._lr_multiplier.multiplier(self.iterations)
            return super()._decayed_lr(dtype) * ops.cast(multiplier, dtype)

        def get_config(self):
            config = super().get_config()
            config.update(lr_schedule={str(k): v for k, v in self._lr_multiplier.schedule.items()})
            return config

    return PiecewiseLinearLR


@extension("gradient_accumulation")
def extend_with_gradient_accumulation(BaseOptimizer):
    """bert4keras's gradient accumulation: ``grad_accum_steps=2`` micro-steps per update.

    `iterations` counts micro-steps. At a micro-step with iterations % k == 0
    the inner optimizer updates (all its variables) with the mean of the
    gradients accumulated since the previous update; the other micro-steps
    only add their gradient. So the update is delayed: micro-step 0 updates
    with a zero gradient (weight decay still acts) and micro-step k with the
    mean of micro-steps 0..k-1. Schedules and bias correction inside see the
    micro-step count. Keras's own `gradient_accumulation_steps` (update at
    the k-th micro-step with all k gradients, `iterations` counting updates)
    is a different, separate option.
    """

    class GradientAccumulation(BaseOptimizer):
        def __init__(self, *args, grad_accum_steps=2, **kwargs):
            super().__init__(*args, **kwargs)
            if int(grad_accum_steps) != grad_accum_steps or grad_accum_steps < 1:
                raise ValueError(f"`grad_accum_steps` must be a positive integer, got {grad_accum_steps!r}")
            self.grad_accum_steps = int(grad_accum_steps)

        def _create_slots(self, var_list):
            super()._create_slots(var_list)
            self._add_slots("_delayed_gradients", var_list, "ag")

        def _apply_dense(self, gradient, variable):
            now = ops.equal(self.iterations % self.grad_accum_steps, 0)
            accumulated = self._slot("_delayed_gradients", variable)
            with self._intercepting(lambda x, new: ops.where(now, new, _value(x))):
                super()._apply_dense(_value(accumulated) / self.grad_accum_steps, variable)
            zeros = ops.zeros(accumulated.shape, accumulated.dtype)
            self._update(accumulated, ops.where(now, zeros, _value(accumulated)))
            self._update(accumulated, accumulated + gradient)

        def get_config(self):
            config = super().get_config()
            config.update(grad_accum_steps=self.grad_accum_steps)
            return config

    return GradientAccumulation


@extension("lookahead")
def extend_with_lookahead(BaseOptimizer):
    """Lookahead (https://arxiv.org/abs/1907.08610) as bert4keras has it.

    ``steps_per_slow_update=5`` (k), ``slow_step_size=0.5`` (α). After each
    inner update, when iterations % k == 0: slow ← slow + α (w − slow) and
    w ← slow. As in bert4keras the slow weights start at zero and step 0
    syncs, so the first update leaves w = α · w_fast.
    """

    class Lookahead(BaseOptimizer):
        def __init__(self, *args, steps_per_slow_update=5, slow_step_size=0.5, **kwargs):
            super().__init__(*args, **kwargs)
            if (
                isinstance(steps_per_slow_update, bool)
                or not isinstance(steps_per_slow_update, (int, np.integer))
                or steps_per_slow_update < 1
            ):
                raise ValueError(
                    f"{type(self).__name__}: steps_per_slow_update must be an integer >= 1, "
                    f"got {steps_per_slow_update!r}"
                )
            self.steps_per_slow_update = int(steps_per_slow_update)
            self.slow_step_size = checked_number(type(self).__name__, "slow_step_size", slow_step_size, 0, 1)

        def _create_slots(self, var_list):
            super()._create_slots(var_list)
            self._add_slots("_slow_weights", var_list, "slow_var")

        def _apply_dense(self, gradient, variable):
            super()._apply_dense(gradient, variable)
            sync = ops.equal(self.iterations % self.steps_per_slow_update, 0)
            slow = self._slot("_slow_weights", variable)
            moved = slow + self.slow_step_size * (variable - slow)
            slow_t = self._update(slow, ops.where(sync, moved, _value(slow)))
            self._update(variable, ops.where(sync, slow_t, _value(variable)))

        def get_config(self):
            config = super().get_config()
            config.update(steps_per_slow_update=self.steps_per_slow_update, slow_step_size=self.slow_step_size)
            return config

    return Lookahead


@extension("lazy_optimization")
def extend_with_lazy_optimization(BaseOptimizer):
    """Leaves rows (last axis) whose gradient is all zero unchanged, e.g. unused embeddings.

    ``include_in_lazy_optimization=[]``: regexes on variable paths choosing
    the variables this applies to (none by default). The moments still decay.
    """

    class LazyOptimization(BaseOptimizer):
        def __init__(self, *args, include_in_lazy_optimization=None, **kwargs):
            super().__init__(*args, **kwargs)
            self._lazy_patterns = compile_patterns(include_in_lazy_optimization, "include_in_lazy_optimization")

        def _apply_dense(self, gradient, variable):
            if not self._matches(variable, self._lazy_patterns):
                return super()._apply_dense(gradient, variable)
            rows = ops.cast(ops.any(ops.not_equal(gradient, 0.0), axis=-1, keepdims=True), variable.dtype)

            def lazy(x, new):
                return x + (new - x) * rows if x is variable else new

            with self._intercepting(lazy):
                super()._apply_dense(gradient, variable)

        def get_config(self):
            config = super().get_config()
            config.update(include_in_lazy_optimization=[p.pattern for p in self._lazy_patterns])
            return config

    return LazyOptimization


class _Backup:
    """Holds the weights `apply_ema_weights` replaced, outside TF's checkpoint tracking."""

    weights = None


@extension("exponential_moving_average")
def extend_with_exponential_moving_average(BaseOptimizer):
    """Keeps an exponential moving average of the weights (``ema_momentum=0.999``).

    After each update: ema ← μ · ema + (1 − μ) · w, ema starting at 0.
    ``apply_ema_weights(bias_correction=True)`` backs the weights up and
    loads ema / (1 − μ^iterations) into them; ``reset_old_weights()``
    restores the backup. `ema_momentum` is also Keras's argument of that
    name, which only Keras's own `use_ema` reads.
    """

    class ExponentialMovingAverage(BaseOptimizer):
        def __init__(self, *args, ema_momentum=0.999, **kwargs):
            checked_number(self.__class__.__name__, "ema_momentum", ema_momentum, 0, 1)
            super().__init__(*args, ema_momentum=ema_momentum, **kwargs)
            self._ema_backup = _Backup()

        def _create_slots(self, var_list):
            super()._create_slots(var_list)
            self._add_slots("_ema_weights", var_list, "ema")

        def _apply_dense(self, gradient, variable):
            super()._apply_dense(gradient, variable)
            ema = self._slot("_ema_weights", variable)
            self._update(ema, ema * self.ema_momentum + variable * (1.0 - self.ema_momentum))

        @property
        def model_weights(self):
            return self._trainable_variables if self.built else []

        @property
        def ema_weights(self):
            return self._ema_weights if self.built else []

        @property
        def old_weights(self):
            return self._ema_backup.weights

        def apply_ema_weights(self, bias_correction=True):
            """Backs up the model's weights and replaces them with their moving averages."""
            if not self.built:
                raise ValueError("`apply_ema_weights()` needs a built optimizer (train a step first)")
            self._ema_backup.weights = [ops.convert_to_numpy(w) for w in self.model_weights]
            averages = [ops.convert_to_numpy(e) for e in self.ema_weights]
            if bias_correction:
                scale = 1.0 - np.power(self.ema_momentum, int(ops.convert_to_numpy(self.iterations)))
                averages = [a / scale for a in averages]
            for weight, average in zip(self.model_weights, averages):
                weight.assign(average.astype(weight.dtype))

        def reset_old_weights(self):
            """Puts back the weights `apply_ema_weights()` backed up."""
            if self._ema_backup.weights is None:
                raise ValueError("`reset_old_weights()` needs a previous `apply_ema_weights()`")
            for weight, old in zip(self.model_weights, self._ema_backup.weights):
                weight.assign(old)

    return ExponentialMovingAverage


@extension("parameter_wise_lr")
def extend_with_parameter_wise_lr(BaseOptimizer):
    """Scales each variable's update by the product of the multipliers whose key it contains.

    ``paramwise_lr_schedule={}``, e.g. {"Embedding": 0.1, "Output": 2}: keys
    are plain substrings of the variable path (not regexes, as in bert4keras).
    """

    class ParameterWiseLR(BaseOptimizer):
        def __init__(self, *args, paramwise_lr_schedule=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.paramwise_lr_schedule = {str(k): float(v) for k, v in (paramwise_lr_schedule or {}).items()}

        def _apply_dense(self, gradient, variable):
            multiplier = 1.0
            for key, value in self.paramwise_lr_schedule.items():
                if key in self._path(variable):
                    multiplier *= value
            if multiplier == 1.0:
                return super()._apply_dense(gradient, variable)

            def scale(x, new):
                return x + (new - x) * multiplier if x is variable else new

            with self._intercepting(scale):
                super()._apply_dense(gradient, variable)

        def get_config(self):
            config = super().get_config()
            config.update(paramwise_lr_schedule=dict(self.paramwise_lr_schedule))
            return config

    return ParameterWiseLR
