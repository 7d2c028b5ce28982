"""bert4keras 0.11.5's optimizers on Keras 3, and GAU-α's LAMB and schedule.

* `Adam` (bias correction optional), `AdaFactor` (also `AdaFactorV1`,
  `AdaFactorV2`), `Lion` (also `LionV2`): base optimizers.
* ``extend_with_*(BaseOptimizer, name=None)`` (weight_decay,
  layer_adaptation, piecewise_linear_lr, gradient_accumulation, lookahead,
  lazy_optimization, exponential_moving_average, parameter_wise_lr): return
  extended optimizer classes; they compose in any order, serialise and load
  back (also in a process that never called the factory).
* `LAMB` = ``extend_with_layer_adaptation(extend_with_weight_decay(Adam))``
  with LAMB's defaults; `PiecewiseLinearDecay`, its learning-rate schedule.
* `DenseAdamW`: Keras's AdamW on dense gradients (Keras 3's Adam mishandles an
  embedding's IndexedSlices gradient on TensorFlow; see its module).

Name patterns match Keras 3 variable paths ("layer/kernel"), not bert4keras's
TF1 names ("layer/kernel:0"). See the modules for the update rules.
"""

from gau_keras.optimizers.adafactor import AdaFactor, AdaFactorV1, AdaFactorV2
from gau_keras.optimizers.adam import Adam
from gau_keras.optimizers.base import HookedOptimizer
from gau_keras.optimizers.dense import DenseAdamW
from gau_keras.optimizers.extensions import (
    extend_with_exponential_moving_average,
    extend_with_gradient_accumulation,
    extend_with_layer_adaptation,
    extend_with_lazy_optimization,
    extend_with_lookahead,
    extend_with_parameter_wise_lr,
    extend_with_piecewise_linear_lr,
    extend_with_weight_decay,
)
from gau_keras.optimizers.lamb import LAMB
from gau_keras.optimizers.lion import Lion, LionV2
from gau_keras.optimizers.schedules import PiecewiseLinearDecay

__all__ = [
    "Adam",
    "AdaFactor",
    "AdaFactorV1",
    "AdaFactorV2",
    "Lion",
    "LionV2",
    "LAMB",
    "PiecewiseLinearDecay",
    "HookedOptimizer",
    "DenseAdamW",
    "extend_with_weight_decay",
    "extend_with_layer_adaptation",
    "extend_with_piecewise_linear_lr",
    "extend_with_gradient_accumulation",
    "extend_with_lookahead",
    "extend_with_lazy_optimization",
    "extend_with_exponential_moving_average",
    "extend_with_parameter_wise_lr",
]
