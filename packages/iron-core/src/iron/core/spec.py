"""Argument specs: the one ABI every layer reads (capture, liveness, layout,
references). An operator's shape rule returns a list of `ArgSpec`, one per
runtime buffer, in call order."""

from __future__ import annotations

import enum
import math

import attrs
import ml_dtypes
import numpy as np

bf16 = np.dtype(ml_dtypes.bfloat16)

_DTYPE_ALIASES = {"bf16": bf16, "bfloat16": bf16, "f32": np.dtype(np.float32)}


def as_dtype(value) -> np.dtype:
    """A numpy dtype from a dtype, a scalar type or a name ("bf16", "int8", "float32")."""
    if isinstance(value, str) and value.lower() in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[value.lower()]
    try:
        return np.dtype(value)
    except TypeError as error:
        raise TypeError(f"not a dtype: {value!r}") from error


def dtype_name(dtype) -> str:
    """Short, stable spelling of a dtype for names, keys and listings."""
    dtype = as_dtype(dtype)
    if dtype == bf16:
        return "bf16"
    if dtype.kind == "V" and dtype.names is None and dtype.type is np.void:
        return dtype.str.lstrip("|")  # numpy names raw bytes "void72" (bits) but reads "V9"
    return dtype.name


class Direction(enum.Enum):
    IN = "in"
    OUT = "out"
    INOUT = "inout"

    @property
    def reads(self) -> bool:
        return self is not Direction.OUT

    @property
    def writes(self) -> bool:
        return self is not Direction.IN


IN, OUT, INOUT = Direction.IN, Direction.OUT, Direction.INOUT


def _shape(value) -> tuple[int, ...]:
    shape = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        raise ValueError(f"a shape is a tuple of non-negative ints, got {value!r}")
    return tuple(int(d) for d in shape)


@attrs.frozen
class ArgSpec:
    """One runtime buffer of an operator: its name, shape, dtype and whether
    the operator reads it, writes it, or both (`INOUT` counts as both, which
    is what liveness needs)."""

    name: str
    shape: tuple[int, ...] = attrs.field(converter=_shape)
    dtype: np.dtype = attrs.field(default=bf16, converter=as_dtype)
    direction: Direction = attrs.field(default=IN, converter=Direction)

    @property
    def reads(self) -> bool:
        return self.direction.reads

    @property
    def writes(self) -> bool:
        return self.direction.writes

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def describe(self) -> list:
        """[name, shape, dtype, direction]: the snapshot row."""
        return [self.name, list(self.shape), dtype_name(self.dtype), self.direction.value]

    def __str__(self) -> str:
        return f"{self.direction.value:5} {self.name} {self.shape} {dtype_name(self.dtype)}"


def same_shape_unary(size, dtype=bf16) -> list[ArgSpec]:
    """x -> y of one shape (an int size means a flat buffer)."""
    return [ArgSpec("x", size, dtype, IN), ArgSpec("y", size, dtype, OUT)]


def same_shape_binary(size, dtype=bf16) -> list[ArgSpec]:
    """(a, b) -> y, all of one shape."""
    return [
        ArgSpec("a", size, dtype, IN),
        ArgSpec("b", size, dtype, IN),
        ArgSpec("y", size, dtype, OUT),
    ]
