"""Operators and their designs.

An operator has a design when its class defines ``design``: a function whose
parameters are filled from the operator's fields and properties by name,
as its shape rule is (``device`` among them, so a design is always for the
device the operator was resolved for)::

    @staticmethod
    def design(size, tile_size, device) -> Design:
        ...
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from iron.core import registry
from iron.core.device import Device
from iron.core.operator import Operator, OperatorError
from iron.design.model import Design


def has_design(cls: type) -> bool:
    return callable(getattr(cls, "design", None))


def design_of(op: Operator, **explicit) -> Design:
    """The design of `op`, resolved for its device; `explicit` keyword
    arguments win over the operator's fields."""
    cls = type(op)
    if not has_design(cls):
        raise TypeError(f"{cls.__name__} has no design (define `design` on the operator class)")
    if op.device is None:
        raise TypeError(
            f"{cls.__name__}: resolve the operator for a device before asking its design"
        )
    fn = cls.design
    design = fn(**op.bind(fn, **explicit))
    if not isinstance(design, Design):
        raise TypeError(f"{cls.__name__}.design returned {type(design).__name__}, not a Design")
    if design.device != op.device:
        raise TypeError(
            f"{cls.__name__}.design built a design for {design.device.key}, "
            f"but the operator is resolved for {op.device.key}"
        )
    return design


@attrs.frozen
class CatalogDesign:
    """One declared case of a registered operator on one device: its design,
    or why there is none (the operator refuses the device)."""

    operator: str
    case: str
    device: Device
    design: Design | None
    refusal: str | None = None


def catalog_designs(device: Device, family: str | None = None) -> Iterator[CatalogDesign]:
    """Every declared case of every registered operator (of `family`) that
    has a design, resolved for `device`."""
    for entry in registry.operators(family):
        cls = registry.get_operator(entry.name)
        if not has_design(cls):
            continue
        for case in cls.cases:
            try:
                op = cls(**case.params).resolve(device)
            except OperatorError as refusal:
                yield CatalogDesign(entry.name, case.label, device, None, str(refusal))
                continue
            yield CatalogDesign(entry.name, case.label, device, design_of(op))
