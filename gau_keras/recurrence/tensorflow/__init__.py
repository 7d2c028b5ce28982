"""The recurrence on TensorFlow (``gau_keras.recurrence`` dispatches here when Keras runs on TensorFlow).

* ``custom_gradient``: ``sru_recurrence``, a ``tf.custom_gradient`` around the
  native kernel or the XLA loops, and ``kernel_choice`` between them;
* ``native``: the fused C++ CPU kernel (``sru_ops.cc``), built on first use;
* ``xla_loops``: the XLA-compiled forward and backward loops;
* ``prepare``: the arguments as tensors, the call's layout;
* ``autodiff``: the same maths differentiated by TensorFlow (the tests' reference).
"""

from gau_keras.recurrence.tensorflow.autodiff import sru_recurrence_autodiff
from gau_keras.recurrence.tensorflow.custom_gradient import ACCELERATOR_WARNING, kernel_choice, sru_recurrence

__all__ = ["sru_recurrence", "sru_recurrence_autodiff", "kernel_choice", "ACCELERATOR_WARNING"]
