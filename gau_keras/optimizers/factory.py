"""How the `extend_with_*` factories make, name, cache and register their classes.

A factory ``extend_with_X(BaseOptimizer, name=None)`` returns a subclass of
``BaseOptimizer`` named ``name`` (default ``"<Base>_X"``); the same arguments
give the same class. Every class it makes is saved with the Keras registered
name ``"gau_keras>ExtendedOptimizer"`` and a config entry ``extended_from``
({base: registered name of the first non-extended class, extensions: [[X, name],
...]}), from which `_ExtendedOptimizerLoader` remakes the class: a model
compiled with e.g. an ``AdamWLR`` loads in a process that never called the
factories (bert4keras needs them called again first).
"""

import functools

import keras

from gau_keras.optimizers.base import HookedOptimizer
from gau_keras.registration import PACKAGE

__all__ = ["extension"]

LOADER_NAME = f"{PACKAGE}>ExtendedOptimizer"
_FACTORIES = {}
_CLASSES = {}


class _ExtendedOptimizerLoader:
    """What `LOADER_NAME` deserialises to: remakes the factory class, then its instance."""

    @classmethod
    def from_config(cls, config, custom_objects=None):
        spec = config.get("extended_from")
        if not spec:
            raise ValueError(f"An optimizer config saved as {LOADER_NAME!r} lacks its `extended_from` entry")
        base = keras.saving.get_registered_object(spec["base"], custom_objects=custom_objects)
        if base is None:
            raise ValueError(
                f"Cannot rebuild the optimizer: its base class {spec['base']!r} is not registered "
                "(import the module that defines it first)"
            )
        for key, name in spec["extensions"]:
            if key not in _FACTORIES:
                raise ValueError(f"Cannot rebuild the optimizer: unknown extension {key!r}")
            base = _FACTORIES[key](base, name)
        return base.from_config(config, custom_objects=custom_objects)


def _register(cls):
    """Saves `cls` under LOADER_NAME (see the module docstring) and finds it by its own name too."""
    keras.saving.register_keras_serializable(PACKAGE, LOADER_NAME.split(">")[1])(cls)
    objects = keras.saving.get_custom_objects()
    objects[LOADER_NAME] = _ExtendedOptimizerLoader  # registering `cls` replaced it
    own_name = f"gau_keras>{cls.__name__}"
    # A factory class named like a class of ours (train.py's "LAMB") must not hide ours.
    if own_name not in objects or objects[own_name].__dict__.get("_extension_spec") is not None:
        objects[own_name] = cls


def _spec(base, key, name):
    """(registered name of the first non-extended class, ((key, name), ...)) of the new class."""
    inherited = base.__dict__.get("_extension_spec")
    if inherited is None:
        return keras.saving.get_registered_name(base), ((key, name),)
    return inherited[0], inherited[1] + ((key, name),)


def extension(key):
    """Turns `make(BaseOptimizer) -> class` into the factory ``extend_with_<key>``."""

    def decorator(make):
        @functools.wraps(make)
        def factory(BaseOptimizer, name=None):
            if not (isinstance(BaseOptimizer, type) and issubclass(BaseOptimizer, HookedOptimizer)):
                raise TypeError(
                    f"extend_with_{key}: `BaseOptimizer` must be a gau_keras optimizer class "
                    f"(Adam, AdaFactor, Lion, LAMB or an extended one), got {BaseOptimizer!r}"
                )
            if name is not None and not (isinstance(name, str) and name.isidentifier()):
                raise ValueError(f"extend_with_{key}: `name` must be a class name, got {name!r}")
            applied = {
                k for klass in BaseOptimizer.__mro__ for k, _ in (klass.__dict__.get("_extension_spec") or ("", ()))[1]
            }
            if key == "weight_decay" and key in applied:
                raise ValueError(
                    f"extend_with_{key}: {BaseOptimizer.__name__} already applies weight decay; "
                    f"a second extension would decay every weight twice per step"
                )
            cache_key = (key, BaseOptimizer, name)
            if cache_key not in _CLASSES:
                cls = make(BaseOptimizer)
                cls.__name__ = cls.__qualname__ = name or f"{BaseOptimizer.__name__}_{key}"
                cls.__module__ = "gau_keras.optimizers"
                cls._extension_spec = _spec(BaseOptimizer, key, name)
                _register(cls)
                _CLASSES[cache_key] = cls
            return _CLASSES[cache_key]

        _FACTORIES[key] = factory
        return factory

    return decorator


keras.saving.get_custom_objects()[LOADER_NAME] = _ExtendedOptimizerLoader
