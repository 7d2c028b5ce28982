"""bert4keras's Lion (sign of an interpolated momentum)."""

import keras
from keras import ops

from gau_keras.optimizers.base import HookedOptimizer
from gau_keras.registration import PACKAGE

__all__ = ["Lion", "LionV2"]


@keras.saving.register_keras_serializable(package=PACKAGE)
class Lion(HookedOptimizer):
    """Lion (https://arxiv.org/abs/2302.06675) as bert4keras 0.11.5 has it::

        w ← w − lr · sign(β1 m + (1 − β1) g)        then   m ← β2 m + (1 − β2) g

    Args:
        learning_rate: float or a `LearningRateSchedule`.
        beta_1: interpolation of momentum and gradient in the update.
        beta_2: decay rate of the momentum.
        name: the optimizer's name (default "Lion").
        **kwargs: Keras's optimizer arguments.
    """

    def __init__(self, learning_rate=3e-4, beta_1=0.95, beta_2=0.98, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name or "Lion", **kwargs)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)

    def _create_slots(self, var_list):
        super()._create_slots(var_list)
        self._add_slots("_momentums", var_list, "m")

    def _apply_dense(self, gradient, variable):
        dtype = variable.dtype
        lr = self._decayed_lr(dtype)
        beta_1, beta_2 = ops.cast(self.beta_1, dtype), ops.cast(self.beta_2, dtype)
        m = self._slot("_momentums", variable)
        direction = ops.sign(beta_1 * m + (1.0 - beta_1) * gradient)
        self._update(variable, variable - lr * direction)
        self._update(m, beta_2 * m + (1.0 - beta_2) * gradient)

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2)
        return config


LionV2 = Lion  # bert4keras's tf.keras name
