"""The private Keras (``keras.src``) names gau_keras relies on, one test each: when a Keras release
moves one, this fails with the name and the place that uses it instead of a user's script failing
somewhere deep. The list and the Keras versions it holds for: docs/architecture.md, "Keras internals"."""

import importlib

import keras
import pytest

pytestmark = pytest.mark.both_backends

#: (module, attribute, the gau_keras code that uses it)
INTERNALS = [
    (
        "keras.src.backend.common.global_state",
        "get_global_attribute",
        "bert4keras/keras2_backend.py: K.learning_phase / in a layer's call",
    ),
    ("keras.src.backend.common.stateless_scope", "in_stateless_scope", "bert4keras/keras2_backend.py: K.get_value"),
    (
        "keras.src.backend.common.stateless_scope",
        "get_stateless_scope",
        "bert4keras/jax_training.py: weight-reading metrics on JAX",
    ),
    ("keras.src.backend.common.symbolic_scope", "in_symbolic_scope", "bert4keras/keras2_backend.py: K.get_value"),
    ("keras.src.backend", "rnn", "bert4keras/keras2_backend.py: K.rnn"),
    ("keras.src.backend", "get_keras_mask", "bert4keras/model.py: Keras2FunctionMetric"),
    ("keras.src.losses.loss", "apply_mask", "bert4keras/model.py: Keras2FunctionMetric"),
    ("keras.src.utils.naming", "get_object_name", "bert4keras/model.py: the names of function metrics"),
    ("keras.src.models.functional", "Functional", "bert4keras/model.py: the face's Model, keras2()"),
    ("keras.src.trainers.data_adapters.data_adapter", "DataAdapter", "snippets/_keras_stream.py: DataGenerator.forfit"),
    ("keras.src.trainers.data_adapters.data_adapter_utils", "get_tensor_spec", "snippets/_keras_stream.py"),
    ("keras.src.trainers.data_adapters.data_adapter_utils", "get_numpy_iterator", "snippets/_keras_stream.py"),
    ("keras.src.trainers.data_adapters.data_adapter_utils", "get_jax_iterator", "snippets/_keras_stream.py"),
    ("keras.src.trainers.data_adapters.generator_data_adapter", "GeneratorDataAdapter", "snippets/_keras_stream.py"),
]


@pytest.mark.parametrize("module, name, user", INTERNALS, ids=[f"{m}.{n}" for m, n, _ in INTERNALS])
def test_the_private_keras_names_we_use_are_there(module, name, user):
    message = (
        f"Keras {keras.__version__} has no {module}.{name}, which gau_keras/{user} uses: "
        f"pin keras to a version that has it (requirements.txt) or port that code"
    )
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"{message} ({error})")
    assert found is not None, message


def test_the_stateless_scope_maps_variables_as_jax_training_expects():
    """jax_training adds values to the metrics' scope through ``state_mapping``, keyed by id(variable)."""
    from keras.src.backend.common.stateless_scope import get_stateless_scope

    variable = keras.Variable(1.0)
    with keras.StatelessScope(state_mapping=[(variable, keras.ops.convert_to_tensor(2.0))]):
        scope = get_stateless_scope()
        assert isinstance(scope.state_mapping, dict) and id(variable) in scope.state_mapping
    assert get_stateless_scope() is None


def test_a_functional_model_is_a_functional_instance():
    """keras2() gives a plain functional model the face by making its class the face's Model, a
    subclass of the class keras.Model(inputs, outputs) makes."""
    from keras.src.models.functional import Functional

    x = keras.Input((3,))
    assert type(keras.Model(x, keras.layers.Dense(2)(x))) is Functional


def test_the_generator_adapter_keeps_the_first_batches_and_signature_we_read():
    """_keras_stream reads the adapter's peeked ``_first_batches`` and sets its ``_output_signature``."""
    import numpy as np
    from keras.src.trainers.data_adapters.generator_data_adapter import GeneratorDataAdapter

    adapter = GeneratorDataAdapter(iter([(np.zeros((2, 3)), np.zeros((2,)))]))
    assert len(adapter._first_batches) == 1 and hasattr(adapter, "_output_signature")


def test_layers_still_flatten_their_sublayers():
    """jax_training and the Loss metrics find a model's layers with ``Layer._flatten_layers``
    (private, no public equivalent that reaches nested layers)."""
    inner = keras.Sequential([keras.layers.Dense(2)])
    x = keras.Input((3,))
    model = keras.Model(x, inner(x))
    assert any(isinstance(layer, keras.layers.Dense) for layer in model._flatten_layers(include_self=False))
