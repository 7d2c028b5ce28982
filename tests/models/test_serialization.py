"""``import gau_keras`` alone registers every serialisable class: .keras files of models built
on our Backbones with heads on top (a classifier; a compiled global pointer) load in a fresh
process that imports nothing else (safe_mode on). Each Backbone's own .keras reload, with the
options that add layers: its run_backbone_test (tests/harness.py)."""

import keras
import pytest

from gau_keras import build_transformer_model, losses
from gau_keras.layers import heads
from tests.harness import SEGMENT_IDS, TOKEN_IDS, assert_reloads_in_fresh_process, outputs_of
from tests.model_utils import TINY

pytestmark = pytest.mark.both_backends


def _build(name):
    encoder = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    if name == "classifier":
        return keras.Model(encoder.inputs, heads.classification_head(encoder.output, 3, 0.0))
    model = keras.Model(encoder.inputs, heads.global_pointer_head(encoder.output, encoder.inputs[0], 2, 4))
    model.compile(optimizer="adam", loss=losses.global_pointer_crossentropy)
    return model


@pytest.mark.parametrize("name", ["classifier", "global_pointer"])
def test_keras_file_loads_after_import_gau_keras_only(name):
    model = _build(name)
    arrays = [TOKEN_IDS, SEGMENT_IDS]
    assert_reloads_in_fresh_process(model, arrays, outputs_of(model, arrays), name, atol=1e-5)
