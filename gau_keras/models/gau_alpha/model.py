"""GAU-alpha: RoFormerV2 with every Attention+FFN block replaced by two GAU layers.

Design notes: docs/models.md.
"""

from gau_keras.layers import GatedAttentionUnit
from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.presets import presets_of
from gau_keras.models.registry import register
from gau_keras.models.roformer_v2.model import RoFormerV2


@register("gau_alpha", "gau-alpha")
class GAU_alpha(RoFormerV2):
    """GAU-alpha (bert4keras names). ``num_hidden_layers`` counts GAU layers
    (24 in the released base model); ``intermediate_size`` is the GAU width e
    and ``attention_key_size`` its shared q/k size s.

    Each layer: ``Transformer-%d-GatedAttentionUnit`` (softmax_plus, no bias,
    rotary) -> Dropout -> Add -> parameter-free RMS norm.
    """

    initializer_order = 3
    default_normalization = "softmax_plus"

    def apply_main_layers(self, x, index):
        name = f"Transformer-{index}-GatedAttentionUnit"
        inputs, arguments = self.attention_inputs(x, 1)
        y = self.apply(
            inputs,
            GatedAttentionUnit,
            arguments=arguments,
            units=self.intermediate_size,
            key_size=self.attention_key_size,
            activation=self.hidden_act,
            use_bias=False,
            normalization=self.normalization,
            attention_dropout=self.attention_dropout_rate,
            softmax_plus_min_len=self.softmax_plus_min_len,
            recompute=self.recompute,
            kernel_initializer=self.initializer,
            name=name,
        )
        return self.residual(x, y, name)

    def variable_mapping(self):
        mapping = {k: v for k, v in super().variable_mapping().items() if not k.startswith("Transformer-")}
        for i in range(self.num_hidden_layers):
            prefix = f"GAU_alpha/encoder/layer_{i}/gau/"
            mapping[f"Transformer-{i}-GatedAttentionUnit"] = {
                "i_dense.kernel": prefix + "i_dense/kernel",
                "q_scaleoffset.gamma": prefix + "q_scaleoffset/gamma",
                "k_scaleoffset.gamma": prefix + "k_scaleoffset/gamma",
                "o_dense.kernel": prefix + "o_dense/kernel",
            }
        return mapping


@register_backbone
class GAUAlphaBackbone(Backbone):
    """``GAU_alpha`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = GAU_alpha
    presets = presets_of("gau_alpha")
