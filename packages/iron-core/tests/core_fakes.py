"""Small operators for iron-core's own tests (real families live elsewhere)."""

import attrs
import numpy as np

from iron.core import (
    IN,
    INOUT,
    OUT,
    ArgSpec,
    Case,
    Composite,
    Operator,
    Tolerance,
    bf16,
    per_call,
    require,
    same_shape_binary,
    same_shape_unary,
    tunable,
)


@attrs.frozen
class Square(Operator):
    size: int

    cases = (Case({"size": 64}),)

    @staticmethod
    def arg_spec(size, dtype=bf16):
        return same_shape_unary(size, dtype)

    def reference(self, x):
        x = x.astype(np.float32)
        return (x * x).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01)


@attrs.frozen
class Add(Operator):
    size: int

    @staticmethod
    def arg_spec(size):
        return same_shape_binary(size)

    def reference(self, a, b):
        return (a.astype(np.float32) + b.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01)


@attrs.frozen
class RowNorm(Operator):
    """Rows of `tile_size`; a (rows, tile) shape from a flat size."""

    size: int
    tile_size: int
    weighted: bool = False
    num_columns: int | None = tunable()

    @staticmethod
    def arg_spec(size, tile_size, weighted, dtype=bf16):
        rows = (size // tile_size, tile_size)
        weight = [ArgSpec("weight", (tile_size,), dtype, IN)] if weighted else []
        return [ArgSpec("x", rows, dtype, IN), *weight, ArgSpec("y", rows, dtype, OUT)]

    def validate(self):
        require(
            self, "size", self.size % self.tile_size == 0, "a whole number of rows of tile_size"
        )
        if self.device is not None and self.num_columns is not None:
            require(
                self,
                "num_columns",
                self.num_columns <= self.device.columns,
                f"at most the device's {self.device.columns} columns",
            )

    def tune(self, device):
        return {"num_columns": min(device.columns, self.size // self.tile_size)}

    def reference(self, x, weight=None):
        x = x.astype(np.float32)
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(1e-5))
        return (y if weight is None else y * weight.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.02, 1e-3)


@attrs.frozen
class Accumulate(Operator):
    """acc += x, in place (INOUT)."""

    size: int

    @staticmethod
    def arg_spec(size):
        return [ArgSpec("x", (size,), bf16, IN), ArgSpec("acc", (size,), bf16, INOUT)]

    def reference(self, x, acc):
        return (acc.astype(np.float32) + x.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01)


@attrs.frozen
class CopyAt(Operator):
    """Copy `size` elements into row `offset` of a (rows, size) buffer."""

    size: int
    rows: int
    offset: int = per_call(0)

    @staticmethod
    def arg_spec(size, rows):
        return [ArgSpec("x", (size,), bf16, IN), ArgSpec("cache", (rows, size), bf16, INOUT)]

    def reference(self, x, cache, *, offset):
        out = cache.copy()
        out[offset] = x
        return out

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()


@attrs.frozen
class SquarePlusOne(Composite):
    """x*x + x, recorded as two steps."""

    size: int

    @staticmethod
    def input_spec(size):
        return [ArgSpec("x", (size,), bf16, IN)]

    def expand(self, g, x):
        return g(Add(self.size), g(Square(self.size), x), x)
