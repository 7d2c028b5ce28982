"""LAMB and the piecewise-linear learning-rate schedule of GAU-α's pretraining.

Both follow docs/pretraining.md::

    m = β1 m + (1 − β1) g          v = β2 v + (1 − β2) g²
    (optional bias correction: m̂ = m / (1 − β1^t), v̂ = v / (1 − β2^t))
    u = m / (sqrt(v) + ε) + λ w    λ = 0 for names matching exclude_from_weight_decay
    trust = ‖w‖ / ‖u‖ if both > 0 else 1   (1 for exclude_from_layer_adaptation)
    w ← w − lr · s(t) · trust · u

Why not ``keras.optimizers.Lamb``: it always applies bias correction, its
weight decay (Keras's ``weight_decay``) is decoupled, i.e. applied to the
weights before the step and outside the trust ratio, and it has no way to
exempt variables from the layer adaptation. None of the three can be
configured away, so ``LAMB`` below is its own ``keras.optimizers.Optimizer``.

Name patterns are regular expressions searched (``re.search``) in the Keras 3
variable *path*, e.g. ``"Transformer-0-GatedAttentionUnit-Norm/gamma"`` or
``"dense/bias"``: the leaf ``variable.name`` alone ("gamma", "kernel") would not
say which layer a variable belongs to, and the path is what bert4keras's TF1
names ("layer/weight:0") correspond to.
"""
import re

import keras
from keras import ops

__all__ = ["LAMB", "PiecewiseLinearDecay"]


def _compile_patterns(patterns, argument):
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


def _inside_strategy():
    """True inside a tf.distribute strategy (scope or replica function)."""
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf  # only the TF backend has strategies

    return tf.distribute.has_strategy()


def _variable_path(variable):
    """The name the exclusion patterns are matched against (Keras 3 `path`)."""
    return getattr(variable, "path", None) or variable.name


@keras.saving.register_keras_serializable(package="gau_keras")
class LAMB(keras.optimizers.Optimizer):
    """LAMB (Layer-wise Adaptive Moments) as used to pretrain GAU-α.

    Args:
        learning_rate: float, or a `LearningRateSchedule` (e.g.
            `PiecewiseLinearDecay`). A schedule is called with the number of
            *updates* made so far (with `gradient_accumulation_steps=k` that is
            the micro-step count // k, unlike Keras's own optimizers which pass
            the micro-step count).
        beta_1, beta_2: decay rates of the first and second moments.
        epsilon: added to sqrt(v) (outside the square root).
        weight_decay_rate: λ, added to the update *inside* the trust ratio.
        bias_correction: divide m and v by (1 − β^t); GAU-α used none.
        exclude_from_weight_decay: regex patterns; variables whose path matches
            one of them get λ = 0 (GAU-α: ["Norm", "bias"]).
        exclude_from_layer_adaptation: regex patterns; variables whose path
            matches get trust = 1.
        **kwargs: the base optimizer arguments (`clipnorm`, `global_clipnorm`,
            `gradient_accumulation_steps`, `loss_scale_factor`, `use_ema`, ...),
            except `weight_decay` (use `weight_decay_rate`). Unlike Keras's
            own optimizers (3.15), accumulation also works inside a
            `tf.distribute` strategy (MirroredStrategy, TPUStrategy); there
            the gradients are all-reduced at every micro-step, and clipping
            and EMA are not available with accumulation.

    Sparse (IndexedSlices) gradients are densified, repeated rows summed.

    Example:
        >>> schedule = PiecewiseLinearDecay(1.76e-3, {0: 1, 160000: 0.5, 640000: 0.1})
        >>> opt = LAMB(schedule, weight_decay_rate=0.01,
        ...            exclude_from_weight_decay=["Norm", "bias"],
        ...            gradient_accumulation_steps=4)
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        weight_decay_rate=0.0,
        bias_correction=False,
        exclude_from_weight_decay=None,
        exclude_from_layer_adaptation=None,
        name=None,
        **kwargs,
    ):
        if kwargs.get("weight_decay") is not None:
            raise ValueError(
                "LAMB applies weight decay inside the trust ratio: pass "
                f"`weight_decay_rate`, not `weight_decay` (got {kwargs['weight_decay']!r})"
            )
        kwargs.pop("weight_decay", None)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.weight_decay_rate = float(weight_decay_rate)
        self.bias_correction = bool(bias_correction)
        self._decay_patterns = _compile_patterns(exclude_from_weight_decay, "exclude_from_weight_decay")
        self._adaptation_patterns = _compile_patterns(
            exclude_from_layer_adaptation, "exclude_from_layer_adaptation"
        )
        self._decay_excluded_keys = set()

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Exempts variables (objects, or regex patterns on their path) from λ.

        Overrides Keras's method (which configures the decoupled `weight_decay`
        LAMB does not use) so that the Keras API acts on LAMB's own λ.
        """
        if self.built:
            raise ValueError("`exclude_from_weight_decay()` must be called before the optimizer is built")
        self._decay_patterns += _compile_patterns(var_names, "var_names")
        self._decay_excluded_keys |= {self._var_key(v) for v in var_list or ()}

    def _matches(self, variable, patterns):
        path = _variable_path(variable)
        return any(p.search(path) for p in patterns)

    def build(self, var_list):
        """Creates m and v per variable and fixes each variable's exclusions."""
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(var_list, ["m", "v"])
        # Python booleans, decided once per variable from its path: update_step
        # may receive the raw tf.Variable (no path) under the TF backend.
        self._use_decay = [
            self._var_key(v) not in self._decay_excluded_keys and not self._matches(v, self._decay_patterns)
            for v in var_list
        ]
        self._use_adaptation = [not self._matches(v, self._adaptation_patterns) for v in var_list]

    def _get_current_learning_rate(self):
        # Schedules see the update count (`iterations` already divides by the
        # accumulation steps); Keras's base passes the micro-step count.
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def _backend_apply_gradients(self, grads, trainable_variables):
        """Keras's flow, except accumulation inside a tf.distribute strategy.

        Keras wraps the whole update, gradient all-reduce included, in a
        `cond` on "is this an update step", which a strategy's cross-replica
        merge cannot run in. Here the all-reduce runs at every micro-step and
        the `cond` moves into each variable's own update (`update_step`).
        """
        if not (self.gradient_accumulation_steps and _inside_strategy()):
            return super()._backend_apply_gradients(grads, trainable_variables)
        if self.clipnorm or self.clipvalue or self.global_clipnorm or self.use_ema:
            raise ValueError("LAMB: gradient clipping and EMA are not supported together with "
                             "gradient_accumulation_steps inside a tf.distribute strategy")
        self._accumulate_in_update_step = True
        try:
            self._backend_update_step(grads, trainable_variables, self.learning_rate)
        finally:
            self._accumulate_in_update_step = False

    def update_step(self, gradient, variable, learning_rate):
        """One LAMB step for one variable (any shape), or one accumulation micro-step."""
        # Densify sparse (IndexedSlices) gradients, summing repeated rows: the
        # moments and the trust ratio are dense anyway, and g² must square sums.
        gradient = ops.add(ops.zeros(variable.shape, variable.dtype), ops.cast(gradient, variable.dtype))
        if not getattr(self, "_accumulate_in_update_step", False):
            return self._lamb_step(gradient, variable, learning_rate)
        steps = self.gradient_accumulation_steps
        accumulator = self._accumulated_gradients[self._get_variable_index(variable)]
        total = accumulator + gradient

        def step():
            self._lamb_step(total / steps, variable, learning_rate)
            self.assign(accumulator, ops.zeros_like(total))

        ops.cond(ops.equal((self._iterations + 1) % steps, 0), step, lambda: self.assign(accumulator, total))

    def _lamb_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        lr = ops.cast(learning_rate, dtype)
        m = self._momentums[index]
        v = self._velocities[index]

        self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
        self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient))
        m_hat, v_hat = m, v
        if self.bias_correction:
            step = ops.cast(self.iterations + 1, dtype)
            m_hat = m / (1.0 - ops.power(ops.cast(self.beta_1, dtype), step))
            v_hat = v / (1.0 - ops.power(ops.cast(self.beta_2, dtype), step))

        update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
        if self._use_decay[index] and self.weight_decay_rate:
            update = update + self.weight_decay_rate * variable

        if self._use_adaptation[index]:
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            u_norm = ops.sqrt(ops.sum(ops.square(update)))
            usable = ops.logical_and(ops.greater(w_norm, 0.0), ops.greater(u_norm, 0.0))
            trust = ops.where(usable, w_norm / ops.where(usable, u_norm, 1.0), 1.0)
            update = trust * update
        self.assign_sub(variable, lr * update)

    def get_config(self):
        config = super().get_config()
        config.pop("weight_decay", None)
        config.update(
            {
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "weight_decay_rate": self.weight_decay_rate,
                "bias_correction": self.bias_correction,
                "exclude_from_weight_decay": [p.pattern for p in self._decay_patterns],
                "exclude_from_layer_adaptation": [p.pattern for p in self._adaptation_patterns],
            }
        )
        return config


def _parse_schedule(schedule):
    """{step: value} with int-like (possibly string) keys → sorted [(int, float)]."""
    if not isinstance(schedule, dict) or not schedule:
        raise ValueError(f"`schedule` must be a non-empty dict {{step: multiplier}}, got {schedule!r}")
    knots = {}
    for key, value in schedule.items():
        try:
            step = float(key)
        except (TypeError, ValueError):
            raise ValueError(f"`schedule` key {key!r} is not a step number") from None
        if step != int(step) or step < 0:
            raise ValueError(f"`schedule` key {key!r} must be a non-negative integer step")
        if int(step) in knots:
            raise ValueError(f"`schedule` has step {int(step)} twice (key {key!r})")
        try:
            knots[int(step)] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"`schedule` value {value!r} at step {key!r} is not a number") from None
    return sorted(knots.items())


@keras.saving.register_keras_serializable(package="gau_keras")
class PiecewiseLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """lr(t) = base_lr · s(t), s piecewise linear through the knots of `schedule`.

    s is linear between knots and constant after the last one (and before the
    first one). With `from_zero` and a first knot not at 0, (0, 0) is prepended,
    so {1000: 1, 2000: 0.1} is a 1000-step warm-up followed by a decay. `t` is
    the optimizer's update count before the update, so the first update uses
    s(0). Keys may be strings ("1000"), as they come out of JSON configs.
    """

    def __init__(self, base_lr, schedule, from_zero=True, name=None):
        self.base_lr = float(base_lr)
        self.schedule = dict(_parse_schedule(schedule))
        self.from_zero = bool(from_zero)
        self.name = name
        knots = sorted(self.schedule.items())
        if self.from_zero and knots[0][0] != 0:
            knots = [(0, 0.0)] + knots
        self._knots = knots

    def multiplier(self, step):
        """s(step) as a float32 scalar tensor; `step` is a scalar (int or tensor)."""
        t = ops.cast(step, "float32")
        value = ops.cast(self._knots[0][1], "float32")
        # Sum of clipped ramps: each segment adds its rise once t passes its end.
        for (t0, v0), (t1, v1) in zip(self._knots[:-1], self._knots[1:]):
            value = value + (v1 - v0) * ops.clip((t - t0) / float(t1 - t0), 0.0, 1.0)
        return value

    def __call__(self, step):
        return self.base_lr * self.multiplier(step)

    def get_config(self):
        return {
            "base_lr": self.base_lr,
            "schedule": {str(k): v for k, v in self.schedule.items()},
            "from_zero": self.from_zero,
            "name": self.name,
        }
