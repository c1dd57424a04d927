"""Repeat: each row of a (rows, cols) matrix `repeat` times over (repeat-interleave)."""

from __future__ import annotations

import attrs
import numpy as np

from iron.core import (
    IN,
    OUT,
    ArgSpec,
    Case,
    Operator,
    Tolerance,
    as_dtype,
    bf16,
    dtype_name,
    require,
)
from iron.ops.eltwise.common import BD_ITERATIONS, BD_WRAP, WORD, bd_problem


@attrs.frozen
class Repeat(Operator):
    """y[i * repeat + r] = x[i] for r < repeat: np.repeat along rows (how a
    KV group reaches the query heads that share it). Bit-exact.

    The data moves through the array untouched, one shim buffer descriptor
    each way: the fill re-reads x `repeat` times with a zero outer stride,
    the drain interleaves. A row moves as (count, run) with run a whole
    number of 4-byte words; `split` is the first legal one."""

    rows: int
    cols: int
    repeat: int
    dtype: np.dtype = attrs.field(default=bf16, converter=as_dtype)

    cases = (
        Case({"rows": 8, "cols": 64, "repeat": 4}),
        Case({"rows": 8, "cols": 64, "repeat": 4, "dtype": "int32"}),
        Case({"rows": 8, "cols": 2048, "repeat": 4}),  # a row split into 2 runs of 1024
    )

    @staticmethod
    def arg_spec(rows, cols, repeat, dtype):
        return [
            ArgSpec("x", (rows, cols), dtype, IN),
            ArgSpec("y", (rows * repeat, cols), dtype, OUT),
        ]

    @property
    def split(self) -> tuple[int, int] | None:
        """(count, run): the fewest runs a row splits into that both
        descriptors accept, or None when none does."""
        for count in range(1, min(self.cols, BD_WRAP) + 1):
            if self.cols % count == 0 and self._split_problem(count) is None:
                return count, self.cols // count
        return None

    def _split_problem(self, count: int) -> str | None:
        rows, cols, repeat, run = self.rows, self.cols, self.repeat, self.cols // count
        sizes = (repeat, rows, count, run)
        fill = bd_problem(sizes, (0, cols, run, 1), self.dtype.itemsize)
        return fill or bd_problem(sizes, (cols, cols * repeat, run, 1), self.dtype.itemsize)

    def validate(self):
        for name in ("rows", "cols", "repeat"):
            require(self, name, getattr(self, name) >= 1, "at least 1")
        require(
            type(self),
            f"dtype={dtype_name(self.dtype)}",
            self.dtype.itemsize <= WORD,
            "at most 4 bytes per element (the widest element the DMA moves)",
        )
        require(
            self,
            "repeat",
            self.repeat <= BD_ITERATIONS,
            f"at most {BD_ITERATIONS}: the fill re-reads x once per iteration of its "
            "descriptor's outermost dimension",
        )
        require(
            self,
            "cols",
            self.split is not None,
            f"a row must split into at most {BD_WRAP} runs of at most {BD_WRAP} 4-byte words, "
            f"each a whole number of words; no divisor of cols does "
            f"(unsplit: {self._split_problem(1)})",
        )

    @staticmethod
    def design(rows, cols, repeat, split, dtype, device):
        from iron.ops.eltwise import movers  # loads iron.design on first use

        return movers.repeat(rows, cols, repeat, split, device, dtype)

    def reference(self, x):
        return np.repeat(x, self.repeat, axis=0)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()
