"""bert4keras's Adam: optional bias correction, ε outside the square root."""

import keras
from keras import ops

from gau_keras.optimizers.base import HookedOptimizer
from gau_keras.registration import PACKAGE

__all__ = ["Adam"]


@keras.saving.register_keras_serializable(package=PACKAGE)
class Adam(HookedOptimizer):
    """Adam as bert4keras 0.11.5 defines it, the base its extensions build on::

        m = β1 m + (1 − β1) g        v = β2 v + (1 − β2) g²
        (bias_correction: m̂ = m / (1 − β1^t), v̂ = v / (1 − β2^t), t = iterations + 1)
        w ← w − lr · m̂ / (sqrt(v̂) + ε)

    Unlike `keras.optimizers.Adam`: ε defaults to 1e-6 and is added outside
    the square root, and the bias correction can be switched off (GAU-α and
    LAMB train without it). Extend it with the `extend_with_*` factories.

    Args:
        learning_rate: float or a `LearningRateSchedule` (called with the
            number of updates made so far).
        beta_1, beta_2: decay rates of the first and second moments.
        epsilon: added to sqrt(v̂).
        bias_correction: divide the moments by (1 − β^t).
        name: the optimizer's name (default "Adam").
        **kwargs: Keras's optimizer arguments (`clipnorm`, `global_clipnorm`,
            `gradient_accumulation_steps`, `loss_scale_factor`, ...).
    """

    def __init__(
        self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-6, bias_correction=True, name=None, **kwargs
    ):
        super().__init__(learning_rate=learning_rate, name=name or "Adam", **kwargs)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon or keras.config.epsilon())
        self.bias_correction = bool(bias_correction)

    def _create_slots(self, var_list):
        super()._create_slots(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(var_list, ["m", "v"])

    def _apply_dense(self, gradient, variable):
        dtype = variable.dtype
        lr = self._decayed_lr(dtype)
        beta_1, beta_2 = ops.cast(self.beta_1, dtype), ops.cast(self.beta_2, dtype)
        m = self._slot("_momentums", variable)
        v = self._slot("_velocities", variable)
        m_t = self._update(m, beta_1 * m + (1.0 - beta_1) * gradient)
        v_t = self._update(v, beta_2 * v + (1.0 - beta_2) * ops.square(gradient))
        if self.bias_correction:
            step = ops.cast(self.iterations + 1, dtype)
            m_t = m_t / (1.0 - ops.power(beta_1, step))
            v_t = v_t / (1.0 - ops.power(beta_2, step))
        self._update(variable, variable - lr * m_t / (ops.sqrt(v_t) + self.epsilon))

    def get_config(self):
        config = super().get_config()
        config.update(
            beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon, bias_correction=self.bias_correction
        )
        return config
