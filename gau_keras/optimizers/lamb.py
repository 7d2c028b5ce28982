"""LAMB: bert4keras's Adam with weight decay inside layer adaptation, as GAU-α pretrains."""

import keras

from gau_keras.optimizers.adam import Adam
from gau_keras.optimizers.extensions import extend_with_layer_adaptation, extend_with_weight_decay
from gau_keras.registration import PACKAGE

__all__ = ["LAMB"]


@keras.saving.register_keras_serializable(package=PACKAGE)
class LAMB(extend_with_layer_adaptation(extend_with_weight_decay(Adam))):
    """LAMB (Layer-wise Adaptive Moments) as used to pretrain GAU-α.

    Exactly ``extend_with_layer_adaptation(extend_with_weight_decay(Adam))``
    with LAMB's defaults (no bias correction, no decay unless asked)::

        u = m̂ / (sqrt(v̂) + ε) + λ w        (λ = 0 for exclude_from_weight_decay)
        trust = ‖w‖ / ‖u‖ (1 if either is 0, or for exclude_from_layer_adaptation)
        w ← w − lr · trust · u

    (the layer adaptation recovers u from the update as Δ / max(lr, 1e-7)).

    Why not ``keras.optimizers.Lamb``: it always applies bias correction, its
    weight decay is decoupled (applied before the step, outside the trust
    ratio), and it cannot exempt variables from the layer adaptation.

    Args:
        learning_rate: float, or a `LearningRateSchedule` (e.g.
            `PiecewiseLinearDecay`), called with the number of *updates* made
            so far (with `gradient_accumulation_steps=k` that is the micro-step
            count // k, unlike Keras's own optimizers which pass the
            micro-step count).
        beta_1, beta_2: decay rates of the first and second moments.
        epsilon: added to sqrt(v) (outside the square root).
        weight_decay_rate: λ, added to the update *inside* the trust ratio.
        bias_correction: divide m and v by (1 − β^t); GAU-α used none.
        exclude_from_weight_decay: regex patterns searched in the variable
            *path* (e.g. "Transformer-0-GatedAttentionUnit-Norm/gamma");
            matching variables get λ = 0 (GAU-α: ["Norm", "bias"]).
        exclude_from_layer_adaptation: regex patterns; matching variables get
            trust = 1.
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
        super().__init__(
            learning_rate=learning_rate,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            bias_correction=bias_correction,
            weight_decay_rate=weight_decay_rate,
            exclude_from_weight_decay=exclude_from_weight_decay,
            exclude_from_layer_adaptation=exclude_from_layer_adaptation,
            name=name or "LAMB",
            **kwargs,
        )
