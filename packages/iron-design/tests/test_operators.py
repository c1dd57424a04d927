import attrs
import numpy as np
import pytest

from iron.core import Case, Device, Operator, Tolerance, same_shape_unary
from iron.core.conformance import catalog_cases
from iron.core.testing import check_conformance, require_distribution
from iron.design import examples
from iron.design.operators import catalog_designs, design_of, has_design


@attrs.frozen
class Doubler(Operator):
    size: int
    tile: int = 256

    cases = (Case({"size": 1024}),)

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size, np.int32)

    def reference(self, x):
        return 2 * x

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()

    @staticmethod
    def design(size, tile, device):
        return examples.add_one(device, n=size, tile=tile)


@attrs.frozen
class NoDesign(Doubler):
    design = None


@attrs.frozen
class WrongDesign(Doubler):
    @staticmethod
    def design(size):
        return size


def test_design_of_binds_fields_and_the_device(npu2):
    design = design_of(Doubler(size=1024).resolve(npu2))
    assert design == examples.add_one(npu2, n=1024, tile=256)
    assert design_of(Doubler(size=1024).resolve(npu2), tile=512).fifo("in").shape == (512,)


def test_design_of_refuses_what_it_cannot_build(npu1):
    with pytest.raises(TypeError, match="Doubler: resolve the operator for a device"):
        design_of(Doubler(size=1024))
    assert not has_design(NoDesign)
    with pytest.raises(TypeError, match="NoDesign has no design"):
        design_of(NoDesign(size=1024).resolve(npu1))
    with pytest.raises(TypeError, match=r"WrongDesign\.design returned int, not a Design"):
        design_of(WrongDesign(size=1024).resolve(npu1))


def test_a_design_for_another_device_is_refused(npu1):
    @attrs.frozen
    class Elsewhere(Doubler):
        @staticmethod
        def design(size, tile):
            return examples.add_one(Device.from_name("npu2"), n=size, tile=tile)

    with pytest.raises(TypeError, match=r"built a design for npu2:aie2p:8x4.*resolved for npu1"):
        design_of(Elsewhere(size=1024).resolve(npu1))


def test_the_catalog_lists_every_case_with_a_design(npu1):
    require_distribution("iron-design-example-plugin")
    found = [(c.operator, c.case) for c in catalog_designs(npu1)]
    assert ("AddOne", "size=4096") in found and ("AddOne", "oversized-lines") in found
    assert all(c.design is not None for c in catalog_designs(npu1, family="design_example"))


def test_the_fixture_family_passes_the_conformance_checks():
    require_distribution("iron-design-example-plugin")
    items = catalog_cases("design_example")
    assert [str(i) for i in items] == ["AddOne[size=4096]", "AddOne[oversized-lines]"]
    for item in items:
        check_conformance(item)
