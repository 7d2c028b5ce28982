"""Decorators that add or forbid keyword arguments of a method (bert4keras
uses them on layers' and optimizers' ``__init__``)."""

import functools


def insert_arguments(**arguments):
    """Adds keyword arguments with defaults to a method.

    Each ``name=default`` becomes ``self.name`` (the caller's value when given,
    taken out of the keyword arguments before the method runs, else the default).
    """

    def decorator(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            for name, default in arguments.items():
                setattr(self, name, kwargs.pop(name, default))
            return method(self, *args, **kwargs)

        return wrapper

    return decorator


def delete_arguments(*arguments):
    """Makes a method refuse the keyword arguments named (a TypeError naming the class)."""

    def decorator(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            for name in arguments:
                if name in kwargs:
                    raise TypeError(f"{type(self).__name__} got an unexpected keyword argument '{name}'")
            return method(self, *args, **kwargs)

        return wrapper

    return decorator
