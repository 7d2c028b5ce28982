"""GlobalMaxPooling1D through the layer harness (its masked maximum: tests/layers/test_merging.py)."""

import pytest

from gau_keras.layers import GlobalMaxPooling1D
from tests.harness import PADDING, floats, run_layer_test

pytestmark = pytest.mark.both_backends  # also runs in the JAX pass (tests/conftest.py)


def test_global_max_pooling_1d_passes_the_layer_harness():
    run_layer_test(GlobalMaxPooling1D, {}, floats(2, 5, 8), (2, 8), input_mask=PADDING, expected_output_mask=None)
