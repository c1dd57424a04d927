"""Every design this installation can make, by a stable key: the examples
and the tests' own designs on both devices, and every declared case of
every registered operator (a composite's part designs included). Which
operators are registered depends on what is installed: the iron-design
session has only the fixture family, the slow session every family."""

from __future__ import annotations

from collections.abc import Iterator

from iron.core import Device, registry
from iron.core.operator import OperatorError
from iron.design import Design, examples
from iron.design.operators import design_of, has_design

DEVICES = ("npu1", "npu2")


def local_designs() -> Iterator[tuple[str, Design]]:
    """The examples and the designs the tests build, on both devices."""
    from test_programmed_pool import replay, two_pools

    for name in DEVICES:
        device = Device.from_name(name)
        for example, make in examples.EXAMPLES.items():
            yield f"{name}/example/{example}", make(device)
        yield f"{name}/test/replay", replay(device)
        yield f"{name}/test/two_pools", two_pools(device)


def catalog_designs() -> Iterator[tuple[str, Design]]:
    """Every case of every registered operator that has a design (or whose
    parts have), on both devices; cases an operator refuses are skipped."""
    for name in DEVICES:
        device = Device.from_name(name)
        for entry in registry.operators():
            cls = registry.get_operator(entry.name)
            for case in cls.cases:
                try:
                    op = cls(**case.params).resolve(device)
                except OperatorError:
                    continue
                if has_design(cls):
                    yield f"{name}/{entry.name}/{case.label}", design_of(op)
                elif hasattr(op, "designs"):
                    for part, design in op.designs().items():
                        yield f"{name}/{entry.name}/{case.label}/{part}", design
