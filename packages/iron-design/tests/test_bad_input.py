"""Bad input to the design entry points: a value that is not a Design is
refused naming the function, instead of an AttributeError from inside."""

import numpy as np
import pytest

from iron.design import check, place, simulate
from iron.design.examples import add_one
from iron.design.mlir import to_mlir
from iron.design.usage import usage


class HasDesign:
    def design(self, device):
        raise AssertionError("not called")


@pytest.mark.parametrize("fn", [place, check, usage, to_mlir], ids=lambda f: f.__name__)
@pytest.mark.parametrize("value", ["npu2", None, 3])
def test_entry_points_refuse_what_is_not_a_design(fn, value):
    name = "place" if fn in (usage, to_mlir) else fn.__name__
    with pytest.raises(TypeError, match=rf"{name}: design must be an iron\.design\.Design, got"):
        fn(value)


def test_an_operator_given_instead_of_its_design_is_told_how():
    with pytest.raises(TypeError, match=r"call the operator's design\(device\)\), got HasDesign"):
        check(HasDesign())
    with pytest.raises(TypeError, match=r"simulate: design must be an iron\.design\.Design"):
        simulate(HasDesign(), {"x": np.zeros(4, np.int32)})


def test_a_real_design_still_passes(npu2):
    assert check(add_one(npu2)).ok
