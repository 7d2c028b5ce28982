"""The piecewise-linear learning-rate schedule (GAU-α's, bert4keras's `piecewise_linear`)."""

import keras
from keras import ops

from gau_keras.registration import PACKAGE

__all__ = ["PiecewiseLinearDecay"]


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


@keras.saving.register_keras_serializable(package=PACKAGE)
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
