"""ELECTRA (Google): BERT's encoder under the ``electra/`` scope, with the
discriminator's replaced-token head instead of the pooler and the MLM head.

Design notes: docs/models.md (BERT and its family).
"""

import keras

from gau_keras.models.backbone import Backbone, register_backbone
from gau_keras.models.bert.model import BERT
from gau_keras.models.registry import register


@register("electra")
class ELECTRA(BERT):
    """ELECTRA (bert4keras names). ``with_discriminator`` (True = sigmoid, or an
    activation name) adds ``Discriminator-Dense`` (hidden_act) and
    ``Discriminator-Prediction`` [B, L, 1]; ``with_pool`` / ``with_mlm`` do not
    exist here (a TypeError, as bert4keras's), nor do the LM / UniLM applications."""

    checkpoint_prefix = "electra/"
    has_mlm_head = False

    def __init__(self, *args, with_discriminator=False, **kwargs):
        for name in ("with_pool", "with_mlm"):
            if name in kwargs:
                raise TypeError(
                    f"ELECTRA got an unexpected keyword argument {name!r}: ELECTRA has no pooler "
                    f"or MLM head (use with_discriminator)"
                )
        if kwargs.get("with_nsp"):  # bert4keras takes it and builds no head: refused rather than dropped
            raise ValueError(
                f"with_nsp={kwargs['with_nsp']!r}: ELECTRA has no next-sentence head (use with_discriminator)"
            )
        if kwargs.get("application", "encoder") != "encoder":
            raise ValueError(
                f"application={kwargs['application']!r}: ELECTRA can not be used as an "
                f"{kwargs['application']!r} model (it has no MLM head)"
            )
        super().__init__(*args, **kwargs)
        self.with_discriminator = with_discriminator

    def apply_final_layers(self, x):
        if not self.with_discriminator:
            return x
        activation = "sigmoid" if self.with_discriminator is True else self.with_discriminator
        x = self.apply(
            x,
            keras.layers.Dense,
            units=self.hidden_size,
            activation=self.hidden_act,
            kernel_initializer=self.initializer,
            name="Discriminator-Dense",
        )
        return self.apply(
            x,
            keras.layers.Dense,
            units=1,
            activation=activation,
            dtype="float32",
            kernel_initializer=self.initializer,
            name="Discriminator-Prediction",
        )

    def variable_mapping(self):
        mapping = super().variable_mapping()
        mapping["Embedding-Mapping"] = {
            "kernel": "electra/embeddings_project/kernel",
            "bias": "electra/embeddings_project/bias",
        }
        mapping["Discriminator-Dense"] = {
            "kernel": "discriminator_predictions/dense/kernel",
            "bias": "discriminator_predictions/dense/bias",
        }
        mapping["Discriminator-Prediction"] = {
            "kernel": "discriminator_predictions/dense_1/kernel",
            "bias": "discriminator_predictions/dense_1/bias",
        }
        return mapping

    def embedding_variable_names(self):
        return {"electra/embeddings/word_embeddings"}


@register_backbone
class ElectraBackbone(Backbone):
    """``ELECTRA`` as a keras.Model class of its own (see ``gau_keras.models.backbone``)."""

    transformer_class = ELECTRA
