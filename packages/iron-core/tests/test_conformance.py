import attrs
import numpy as np
import pytest
from core_fakes import Accumulate, CopyAt, RowNorm, Square, SquarePlusOne

from iron.core import (
    Case,
    Composite,
    Operator,
    OperatorError,
    Tolerance,
    bf16,
    hookimpl,
    registry,
    same_shape_unary,
)
from iron.core.conformance import ConformanceCase, ConformanceError, check, check_importable_alone
from iron.core.testing import check_conformance, conformance_params, require_distribution


def item(cls, **params):
    return ConformanceCase(cls.__name__, cls, Case(params))


@pytest.mark.parametrize(
    "case",
    [
        item(Square, size=64),
        item(RowNorm, size=512, tile_size=128, weighted=True),
        item(Accumulate, size=16),
        item(CopyAt, size=8, rows=4),
        item(SquarePlusOne, size=32),
    ],
    ids=str,
)
def test_well_behaved_operators_conform(case):
    check(case)


@attrs.frozen
class WrongShape(Operator):
    size: int

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size)

    def reference(self, x):
        return x[: self.size // 2].copy()

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()


@attrs.frozen
class Noisy(WrongShape):
    def reference(self, x):
        return (x.astype(np.float32) + np.random.default_rng().standard_normal(x.shape)).astype(
            bf16
        )


@attrs.frozen
class Mutating(WrongShape):
    def reference(self, x):
        x[0] = 0
        return x.copy()


@attrs.frozen
class NoTolerance(WrongShape):
    def reference(self, x):
        return x.copy()

    def tolerance(self, device=None, *, inputs=None):
        return 0.01


@attrs.frozen
class RefusesEverywhere(WrongShape):
    def validate(self):
        if self.device is not None:
            raise OperatorError(f"RefusesEverywhere: device={self.device.name}: never")


@attrs.frozen
class BrokenComposite(Composite):
    size: int

    @staticmethod
    def input_spec(size):
        return same_shape_unary(size)[:1]

    def expand(self, g, x):
        return g(Square(self.size * 2), x)


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (WrongShape, r"reference output y is \(4,\) bf16; spec says \(8,\) bf16"),
        (Noisy, "differs between two identical calls"),
        (Mutating, "modified one of its inputs"),
        (NoTolerance, "returned 0.01, not a Tolerance"),
        (RefusesEverywhere, "refused on every device"),
        (BrokenComposite, "expansion does not record"),
    ],
)
def test_broken_promises_are_named(cls, message):
    with pytest.raises(ConformanceError, match=message):
        check(item(cls, size=8))


def test_operator_without_cases_fails():
    with pytest.raises(ConformanceError, match="declares no test cases"):
        check(ConformanceCase("Square", Square, None))


def test_a_refusal_must_name_the_operator():
    @attrs.frozen
    class Anonymous(WrongShape):
        def validate(self):
            if self.device is not None and self.device.name == "npu1":
                raise OperatorError("size is wrong")

        def reference(self, x):
            return x.copy()

    with pytest.raises(ConformanceError, match="refusal does not name the operator"):
        check(item(Anonymous, size=8))


# ---- the installed third-party family, through the pytest plugin's helpers ----

example = conformance_params("example")


@pytest.mark.parametrize("case", example)
def test_third_party_family_conforms(case):
    require_distribution("iron-example-plugin")
    check_conformance(case)
    check_importable_alone(case.name)


def test_third_party_family_declares_its_cases():
    require_distribution("iron-example-plugin")
    assert sorted(str(p.values[0]) for p in example) == [
        "Offset[size=512]",
        "Scale[size=1024]",
        "Scale[size=256,factor=-0.5]",
    ]


# ---- every module of a family imports alone, probed by one interpreter ----


class Probed:
    @staticmethod
    @hookimpl
    def iron_register_operators(register):
        register("First", "probe_first:Thing", summary="imports")
        register("NeedsFirst", "probe_needs_first:Thing", summary="only after probe_first")
        register("Missing", "probe_first:NoSuchThing", summary="no such class")
        register("Absent", "probe_absent:Thing", summary="no such module")


@pytest.fixture
def probed(tmp_path, monkeypatch):
    (tmp_path / "probe_first.py").write_text("class Thing:\n    pass\n")
    (tmp_path / "probe_needs_first.py").write_text(
        "import sys\n\nassert 'probe_first' in sys.modules, 'probe_first not imported'\n"
        "Thing = sys.modules['probe_first'].Thing\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    registry.register_plugin(Probed, name="probed")
    yield
    registry.unregister_plugin("probed")


def test_each_module_is_probed_as_if_no_other_were_imported_before_it(probed):
    check_importable_alone("First")
    with pytest.raises(ConformanceError) as error:
        check_importable_alone("First", "NeedsFirst", "Missing", "Absent")
    broken = [line for line in str(error.value).splitlines() if "does not import alone" in line]
    assert broken == [
        "NeedsFirst: probe_needs_first does not import alone:",
        "Missing: probe_first does not import alone:",
        "Absent: probe_absent does not import alone:",
    ]
    text = str(error.value)
    assert "probe_first not imported" in text and "NoSuchThing" in text
    assert "No module named 'probe_absent'" in text
