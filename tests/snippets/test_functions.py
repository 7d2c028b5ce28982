"""gau_keras.snippets.insert_arguments / delete_arguments."""

import pytest

from gau_keras.snippets import delete_arguments, insert_arguments


class Base:
    def __init__(self, units=1, **kwargs):
        self.units, self.kwargs = units, kwargs


class Extended(Base):
    @insert_arguments(rate=0.5, name="x")
    @delete_arguments("units_old")
    def __init__(self, *args, **kwargs):
        """Docstring kept."""
        super().__init__(*args, **kwargs)


def test_inserted_arguments_become_attributes_and_are_removed():
    e = Extended(3, rate=0.1, other=2)
    assert (e.rate, e.name, e.units, e.kwargs) == (0.1, "x", 3, {"other": 2})
    assert Extended().rate == 0.5
    assert Extended.__init__.__doc__ == "Docstring kept."


def test_deleted_argument_is_refused_with_the_class_name():
    with pytest.raises(TypeError, match="Extended got an unexpected keyword argument 'units_old'"):
        Extended(units_old=3)
