"""The bert4keras face sits on top of the core and changes nothing process-wide (issue 47, part 2).

The core (layers, models, every Backbone) is plain Keras 3; Keras 2's calls come only through the
face's entry points (``build_transformer_model``, ``gau_keras.backend.keras.models.Model``, the
layer names of ``gau_keras.layers``). Building every layer and model, training the CRF / MEMM /
Loss layers through the face and switching ``set_gelu`` leave ``keras.Model``, ``keras.layers.Layer``
and Keras's activation and serialization tables the objects they were. Both backends.
"""

import warnings

import keras
import numpy as np
import pytest
from keras.src import activations as keras_activations
from keras.src.saving import object_registration

import gau_keras.layers  # noqa: F401 - registers the layers
from gau_keras import backend as B
from gau_keras.bert4keras.model import Keras2Mixin, keras2
from gau_keras.layers import ConditionalRandomField, Embedding, Loss, MaximumEntropyMarkovModel
from gau_keras.models import build_transformer_model, extend_with_language_model
from gau_keras.models.registry import backbone_class, resolve_model_class
from gau_keras.registration import PACKAGE
from tests.layer_utils import MeanLoss
from tests.model_utils import TINY

pytestmark = pytest.mark.both_backends

SRUPP = dict(
    vocab_size=23,
    hidden_size=8,
    num_hidden_layers=2,
    proj_size=4,
    num_attention_heads=2,
    attention_every_n_layers=2,
    embedding_size=6,
)
#: every model the builder knows, with a tiny config
CONFIGS = {**TINY, "srupp": SRUPP}


def _snapshot():
    """The objects in keras.Model's and keras.layers.Layer's class dicts (and their bases'), Keras's
    activation table and its serialization tables, as {what: {name: object}}."""
    classes = {cls for cls in keras.Model.__mro__ + keras.layers.Layer.__mro__ if cls.__module__.startswith("keras")}
    # (Python makes a class's empty __annotations__ when something first reads it)
    tables = {
        f"{cls.__module__}.{cls.__qualname__}": {k: v for k, v in vars(cls).items() if k != "__annotations__"}
        for cls in classes
    }
    tables["activations"] = dict(keras_activations.ALL_OBJECTS_DICT)
    tables["custom objects"] = dict(object_registration.GLOBAL_CUSTOM_OBJECTS)
    tables["custom names"] = {id(k): v for k, v in object_registration.GLOBAL_CUSTOM_NAMES.items()}
    return tables


def _assert_same(before, after):
    for what, names in before.items():
        now = after[what]
        assert sorted(now) == sorted(names), (what, sorted(set(now) ^ set(names)))
        changed = [name for name, value in names.items() if now[name] is not value]
        assert not changed, (what, changed)


B_, L, H = 2, 5, 8


def _floats(*shape):
    return lambda rng: rng.normal(size=shape).astype("float32")


def _ints(high, *shape):
    return lambda rng: rng.integers(1, high, size=shape).astype("int32")


def _fixed(value):
    return lambda rng: np.asarray(value)


#: layer class name -> (constructor arguments, one input maker per input); a registered layer
#: without one fails test_every_registered_layer_is_built
RECIPES = {
    "Add": ({}, [_floats(B_, L, H), _floats(B_, L, H)]),
    "AttentionBias": ({"mode": "unilm"}, [_fixed(np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]], "int32"))]),
    "CandidateScores": ({}, [_floats(B_, 3, 7), _ints(7, B_, 4, 3)]),
    "ChoiceLogits": ({}, [_floats(B_ * 3, 1), _ints(9, B_, 3, L)]),
    "Concatenate1D": ({}, [_floats(B_, L, H), _floats(B_, 3, H)]),
    "ConditionalRandomField": ({}, [_floats(B_, L, 4)]),
    "EfficientGlobalPointer": ({"heads": 2, "head_size": 4}, [_floats(B_, L, H)]),
    "Embedding": ({"input_dim": 11, "output_dim": H}, [_ints(11, B_, L)]),
    "FeedForward": ({"units": 12, "activation": "gelu"}, [_floats(B_, L, H)]),
    "FirstToken": ({}, [_floats(B_, L, H)]),
    "FlattenChoices": ({}, [_ints(9, B_, 3, L)]),
    "GatedAttentionUnit": ({"units": 12, "key_size": 4}, [_floats(B_, L, H)]),
    "GatherPositions": ({}, [_floats(B_, L, H), _fixed(np.array([[0, 2, 4], [1, 1, 3]], "int32"))]),
    "GlobalMaxPooling1D": ({}, [_floats(B_, L, H)]),
    "GlobalPointer": ({"heads": 2, "head_size": 4}, [_floats(B_, L, H)]),
    "LayerNormalization": ({}, [_floats(B_, L, H)]),
    "Loss": ({}, [_floats(B_, L, H)]),  # built as its subclass MeanLoss
    "MaximumEntropyMarkovModel": ({}, [_floats(B_, L, 4)]),
    "MultiHeadAttention": ({"heads": 2, "head_size": 4}, [_floats(B_, L, H)] * 3),
    "PositionEmbedding": ({"input_dim": 10, "output_dim": H}, [_floats(B_, L, H)]),
    "RelativePositionEmbedding": ({"input_dim": 7, "output_dim": 4}, [_floats(B_, L, H), _floats(B_, L, H)]),
    "RelativePositionEmbeddingT5": ({"input_dim": 8, "output_dim": 2}, [_floats(B_, L, H), _floats(B_, L, H)]),
    "SRUpp": ({"hidden_size": H, "proj_size": 4}, [_floats(B_, L, H)]),
    "SRUppAttention": ({"proj_size": 4, "out_features": 12}, [_floats(B_, L, H)]),
    "SRUppCell": ({"hidden_size": H, "proj_size": 4}, [_floats(B_, L, H)]),
    "SRUppProjectedLinear": ({"proj_size": 4, "out_features": 12}, [_floats(B_, L, H)]),
    "ScaleOffset": ({}, [_floats(B_, L, H)]),
    "SegmentMemory": ({"memory_length": 3}, [_floats(B_, 3, H), _floats(B_, L, H)]),
    "SinusoidalPositionEmbedding": ({"output_dim": H}, [_floats(B_, L, H)]),
    "SpanLogits": ({}, [_floats(B_, L, 2), _ints(9, B_, L)]),
}
#: stand-ins for abstract registered classes
CONCRETE = {"Loss": MeanLoss}


def _registered_layers():
    """Every layer class registered under gau_keras> (as tests/test_harness.py finds them)."""
    for name, obj in sorted(keras.saving.get_custom_objects().items()):
        if (
            name.startswith(f"{PACKAGE}>")
            and isinstance(obj, type)
            and issubclass(obj, keras.layers.Layer)
            and not issubclass(obj, keras.Model)
        ):
            yield obj


def _build_every_layer(rng):
    for cls in _registered_layers():
        init, makers = RECIPES[cls.__name__]
        arrays = [make(rng) for make in makers]
        layer = CONCRETE.get(cls.__name__, cls)(**init)
        inputs = [keras.Input(a.shape[1:], dtype=str(a.dtype)) for a in arrays]
        model = keras.Model(inputs, layer(inputs if len(inputs) > 1 else inputs[0]))
        model(arrays if len(arrays) > 1 else arrays[0])  # and run (its batch sizes may differ)


def _build_every_model():
    for name, config in CONFIGS.items():
        backbone_class(resolve_model_class(name))(**config)
        build_transformer_model(model=name, **config)
    build_transformer_model(model=extend_with_language_model(resolve_model_class("roformer_v2")), **TINY["roformer_v2"])


class _Doubled(Loss):
    def compute_loss(self, inputs, mask=None):
        loss = keras.ops.mean(keras.ops.square(inputs[0] - inputs[1]))
        self.add_metric(2 * loss, name="double")
        return loss


def _tagger(layer):
    ids = keras.Input((None,), dtype="int32")
    return ids, layer(keras.layers.Dense(3)(Embedding(12, 8, mask_zero=True)(ids)))


def _fit_compat_layers_through_the_face(rng):
    ids, labels = rng.integers(1, 12, size=(8, 6)), rng.integers(0, 3, size=(8, 6))
    histories = {}
    for layer in (ConditionalRandomField(), MaximumEntropyMarkovModel(hidden_dim=2)):
        model = B.keras.models.Model(*_tagger(layer))
        model.compile("adam", loss=layer.sparse_loss, metrics=[layer.sparse_accuracy])
        histories[type(layer).__name__] = model.fit(ids, labels, epochs=1, verbose=0).history
    a, b = keras.Input((3,)), keras.Input((3,))
    model = B.keras.models.Model([a, b], _Doubled(1)([b, keras.layers.Dense(3)(a)]))
    model.compile("sgd")
    x = [rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 3)).astype("float32")]
    histories["Loss"] = model.fit(x, None, epochs=1, verbose=0).history
    return histories


def test_every_registered_layer_is_built():
    assert sorted(cls.__name__ for cls in _registered_layers() if cls.__name__ not in RECIPES) == []


def test_nothing_process_wide_changes(rng):
    before = _snapshot()
    _build_every_layer(rng)
    _build_every_model()
    histories = _fit_compat_layers_through_the_face(rng)
    try:
        B.set_gelu("tanh")
        assert gau_keras.layers.FeedForward(4, activation="gelu").activation == [B.gelu_tanh]
        bert = build_transformer_model(model="bert", with_mlm=True, **TINY["bert"])  # hidden_act 'gelu'
        assert bert.get_layer("MLM-Dense").activation is B.gelu_tanh
        assert bert.get_layer("Transformer-0-FeedForward").activation == [B.gelu_tanh]
        _assert_same(before, _snapshot())
    finally:
        B.set_gelu("erf")
    _assert_same(before, _snapshot())
    assert histories["Loss"]["double"] == pytest.approx([2 * histories["Loss"]["loss"][0]], rel=1e-5)
    assert all(0.0 <= h["sparse_accuracy"][0] <= 1.0 for name, h in histories.items() if name != "Loss")
    assert not hasattr(keras.layers.Layer, "get_output_at") and not hasattr(keras.layers.Dense, "get_output_at")
    assert not hasattr(keras.Model, "fit_generator")


def test_the_core_is_plain_keras_and_the_entry_points_add_keras2_calls(tmp_path):
    core = backbone_class(resolve_model_class("gau_alpha"))(**TINY["gau_alpha"])
    assert not isinstance(core, Keras2Mixin) and not hasattr(core, "fit_generator")
    assert type(core).compute_loss is keras.Model.compute_loss
    face = build_transformer_model(model="gau_alpha", **TINY["gau_alpha"])
    assert isinstance(face, Keras2Mixin) and isinstance(face, type(core)) and type(face).__name__ == type(core).__name__
    assert hasattr(face, "fit_generator") and face.get_layer("Embedding-Token").get_output_at(0) is not None
    lm = build_transformer_model(model="roformer_v2", application="lm", return_keras_model=False, **TINY["roformer_v2"])
    assert isinstance(lm.model, Keras2Mixin)
    ids = np.array([[2, 5, 7, 3]])
    inputs = [ids, np.zeros_like(ids)]
    # a face model's file loads as the face; a core Backbone's (also those written before the face
    # moved on top, under the Backbone's own name) as the core
    face.save(tmp_path / "face.keras")
    core.save(tmp_path / "core.keras")
    again = keras.models.load_model(tmp_path / "face.keras")
    assert isinstance(again, Keras2Mixin) and type(again) is type(face)
    np.testing.assert_allclose(again.predict(inputs, verbose=0), face.predict(inputs, verbose=0), atol=1e-6)
    plain = keras.models.load_model(tmp_path / "core.keras")
    assert type(plain) is type(core)
    assert keras2(plain) is plain and isinstance(plain, Keras2Mixin) and hasattr(plain, "fit_generator")


def test_keras2_needs_a_built_keras_model():
    with pytest.raises(TypeError, match="keras2: model must be a keras.Model, got Dense"):
        keras2(keras.layers.Dense(2))


@pytest.mark.jax_only
def test_a_plain_keras_model_on_jax_has_keras3_semantics_for_the_compat_layers(rng):
    """The MEMM accuracy reads the transitions, which Keras 3's JAX trainer does not map where a
    plain model computes its metrics: a clear error; a Loss layer's add_metric values: a warning."""
    ids, labels = rng.integers(1, 12, size=(8, 6)), rng.integers(0, 3, size=(8, 6))
    memm = MaximumEntropyMarkovModel()
    model = keras.Model(*_tagger(memm))
    model.compile("adam", loss=memm.sparse_loss, metrics=[memm.sparse_accuracy])
    with pytest.raises(RuntimeError, match="gau_keras.backend.keras.models.Model"):
        model.fit(ids, labels, epochs=1, verbose=0)
    a, b = keras.Input((3,)), keras.Input((3,))
    model = keras.Model([a, b], _Doubled(1)([b, keras.layers.Dense(3)(a)]))
    model.compile("sgd")
    x = [rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 3)).astype("float32")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, None, epochs=1, verbose=0)
    assert any("only a model of the bert4keras face" in str(w.message) for w in caught)
