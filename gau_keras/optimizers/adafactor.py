"""bert4keras's AdaFactor: factored second moments, update clipping, parameter scale."""

import keras
import numpy as np
from keras import ops

from gau_keras.optimizers.base import HookedOptimizer, compile_patterns, variable_path
from gau_keras.registration import PACKAGE

__all__ = ["AdaFactor", "AdaFactorV1", "AdaFactorV2"]


def _rms(x):
    """Root mean square over all entries (a scalar)."""
    return ops.sqrt(ops.mean(ops.square(x)))


@keras.saving.register_keras_serializable(package=PACKAGE)
class AdaFactor(HookedOptimizer):
    """AdaFactor (https://arxiv.org/abs/1804.04235) as bert4keras 0.11.5 has it.

    Per variable w with gradient g (t = iterations + 1)::

        g2 = g² + ε1
        v  = β2 v + (1 − β2) g2, stored factored for matrices whose second
             largest axis has >= min_dim_size_to_factor entries: a row and a
             column mean (vr, vc), v ≈ vr · vc / mean(vr)
        u  = g / sqrt(v + ε1);  u /= max(1, rms(u) / clipping_threshold)
        (beta1 > 0: m = β1 m + (1 − β1) u, u = m)
        (parameter scale: u *= max(rms(w), ε2))
        w ← w − lr · u

    Args:
        learning_rate: float, or None for the relative step
            min(1/sqrt(t), 0.01) (×0.05 without parameter scale).
        beta1: momentum of the update (0: none, no slot).
        beta2: decay of v; None for 1 − t^-0.8.
        epsilon1, epsilon2: the ε1 and ε2 above.
        multiply_by_parameter_scale: scale updates by rms(w).
        clipping_threshold: the update clipping threshold (None: no clipping).
        min_dim_size_to_factor: see v above.
        exclude_from_parameter_scale: regex patterns searched in variable paths.
        name: default "AdaFactor".
        **kwargs: Keras's optimizer arguments.
    """

    def __init__(
        self,
        learning_rate=1e-3,
        beta1=0.0,
        beta2=None,
        epsilon1=1e-30,
        epsilon2=1e-3,
        multiply_by_parameter_scale=True,
        clipping_threshold=1.0,
        min_dim_size_to_factor=128,
        exclude_from_parameter_scale=None,
        name=None,
        **kwargs,
    ):
        relative = learning_rate is None
        super().__init__(learning_rate=0.01 if relative else learning_rate, name=name or "AdaFactor", **kwargs)
        self._relative_step = relative
        self.beta1 = float(beta1)
        self._beta2 = None if beta2 is None else float(beta2)
        self.epsilon1 = float(epsilon1)
        self.epsilon2 = float(epsilon2)
        self.multiply_by_parameter_scale = bool(multiply_by_parameter_scale)
        self.clipping_threshold = None if clipping_threshold is None else float(clipping_threshold)
        self.min_dim_size_to_factor = int(min_dim_size_to_factor)
        self._scale_exclusions = list(exclude_from_parameter_scale or [])
        self._scale_patterns = compile_patterns(self._scale_exclusions, "exclude_from_parameter_scale")

    def _get_current_learning_rate(self):
        if not self._relative_step:
            return super()._get_current_learning_rate()
        rate = ops.minimum(1.0 / ops.sqrt(ops.cast(self.iterations + 1, "float32")), 0.01)
        return rate if self.multiply_by_parameter_scale else rate * 0.05

    def _beta2_t(self, dtype):
        if self._beta2 is None:
            return 1.0 - ops.power(ops.cast(self.iterations + 1, dtype), -0.8)
        return self._beta2

    def factored_shape(self, shape):
        """(row shape, row axis, column shape, column axis) of a factored v, or None."""
        # factor over the two largest axes (the later one wins a tie, as argpartition does)
        order = np.argpartition(np.asarray(shape), -2) if len(shape) >= 2 else None
        if order is None or shape[order[-2]] < self.min_dim_size_to_factor:
            return None
        largest, second = int(order[-1]), int(order[-2])
        row = tuple(1 if axis == largest else size for axis, size in enumerate(shape))
        column = tuple(1 if axis == second else size for axis, size in enumerate(shape))
        return row, largest, column, second

    def _create_slots(self, var_list):
        super()._create_slots(var_list)
        # One entry per variable (None where unused) keeps the slot lists indexable.
        self._second_moments, self._row_moments, self._column_moments, self._update_moments = [], [], [], []
        for var in var_list:
            factored = self.factored_shape(tuple(var.shape))
            reference = self.add_variable_from_reference
            if factored is None:
                self._second_moments.append(reference(var, "v"))
                self._row_moments.append(None)
                self._column_moments.append(None)
            else:
                self._second_moments.append(None)
                prefix = variable_path(var).replace("/", "_")
                self._row_moments.append(self.add_variable(factored[0], dtype=var.dtype, name=prefix + "_vr"))
                self._column_moments.append(self.add_variable(factored[2], dtype=var.dtype, name=prefix + "_vc"))
            self._update_moments.append(reference(var, "m") if self.beta1 > 0.0 else None)

    def _apply_dense(self, gradient, variable):
        dtype = variable.dtype
        lr = self._decayed_lr(dtype)
        beta2 = self._beta2_t(dtype)
        g2 = ops.square(gradient) + self.epsilon1
        factored = self.factored_shape(tuple(variable.shape))
        if factored is None:
            v = self._slot("_second_moments", variable)
            v_t = self._update(v, beta2 * v + (1.0 - beta2) * g2)
        else:
            _, row_axis, _, column_axis = factored
            vr = self._slot("_row_moments", variable)
            vc = self._slot("_column_moments", variable)
            vr_t = self._update(vr, beta2 * vr + (1.0 - beta2) * ops.mean(g2, axis=row_axis, keepdims=True))
            vc_t = self._update(vc, beta2 * vc + (1.0 - beta2) * ops.mean(g2, axis=column_axis, keepdims=True))
            v_t = vr_t * vc_t / ops.mean(vr_t, axis=column_axis, keepdims=True)
        u = gradient / ops.sqrt(v_t + self.epsilon1)
        if self.clipping_threshold is not None:
            u = u / ops.maximum(1.0, _rms(u) / self.clipping_threshold)
        if self.beta1 > 0.0:
            m = self._slot("_update_moments", variable)
            u = self._update(m, self.beta1 * m + (1.0 - self.beta1) * u)
        if self.multiply_by_parameter_scale and not self._matches(variable, self._scale_patterns):
            u = u * ops.maximum(_rms(variable), self.epsilon2)
        self._update(variable, variable - lr * u)

    def get_config(self):
        config = super().get_config()
        config.update(
            learning_rate=None if self._relative_step else config["learning_rate"],
            beta1=self.beta1,
            beta2=self._beta2,
            epsilon1=self.epsilon1,
            epsilon2=self.epsilon2,
            multiply_by_parameter_scale=self.multiply_by_parameter_scale,
            clipping_threshold=self.clipping_threshold,
            min_dim_size_to_factor=self.min_dim_size_to_factor,
            exclude_from_parameter_scale=list(self._scale_exclusions),
        )
        return config


# bert4keras's names: V1 was its Keras-2 (get_updates) version, V2 its tf.keras one; one class here.
AdaFactorV1 = AdaFactorV2 = AdaFactor
