"""viewmill.registry: an entry of the wrong class is refused by the registry itself, naming the
entry, its reference and the class it must be."""

from fractions import Fraction

import pytest

from viewmill.registry import Registry, RegistryError


def test_an_entry_of_another_class_is_refused_naming_the_class_it_must_be():
    numbers: Registry[Fraction] = Registry(
        "viewmill.tests", "number", {"half": "fractions:Fraction", "e": "math:e"}, entry_type=float
    )
    assert numbers.get("e") == pytest.approx(2.718, abs=1e-3)
    with pytest.raises(RegistryError, match=r"number 'half' \(fractions:Fraction\): each number entry must be a "
                       r"builtins.float, not <class 'fractions.Fraction'>"):  # fmt: skip
        numbers.get("half")


def test_a_check_runs_after_the_class_check_and_may_convert_the_entry():
    doubled: Registry[float] = Registry("viewmill.tests", "number", {"e": "math:e"}, lambda v: v * 2, entry_type=float)
    assert doubled.get("e") == pytest.approx(5.437, abs=1e-3)
