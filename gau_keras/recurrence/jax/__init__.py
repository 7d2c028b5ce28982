"""The recurrence on JAX (``gau_keras.recurrence`` dispatches here when Keras runs on JAX).

* ``dispatch``: ``sru_recurrence`` and ``kernel_choice``: the Pallas kernel on
  GPU and TPU, the scan pair elsewhere, chosen per lowering platform;
* ``pallas_kernel``: one kernel per pass with the time loop inside (Triton on
  CUDA GPUs, Mosaic on TPUs, Pallas's interpreter on a CPU), a ``custom_vjp``;
* ``scan``: a ``lax.scan`` forward and a hand-written ``custom_vjp`` backward,
  compiled by XLA for any platform, float64 included;
* ``prepare``: the arguments as arrays, the call's layout;
* ``autodiff``: the same maths differentiated by JAX (the tests' reference).
"""

from gau_keras.recurrence.jax.autodiff import sru_recurrence_autodiff
from gau_keras.recurrence.jax.dispatch import MODES, kernel_choice, sru_recurrence

__all__ = ["sru_recurrence", "sru_recurrence_autodiff", "kernel_choice", "MODES"]
