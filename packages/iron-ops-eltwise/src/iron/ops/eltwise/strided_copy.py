"""StridedCopy: gather a strided pattern of the input into a contiguous
window of the output; the rest of the output keeps its contents."""

from __future__ import annotations

import math

import attrs
import numpy as np

from iron.core import (
    IN,
    INOUT,
    ArgSpec,
    Case,
    Operator,
    OperatorError,
    Tolerance,
    as_dtype,
    bf16,
    dtype_name,
    per_call,
    require,
)
from iron.ops.eltwise.common import WORD, bd_problem, reads_up_to

DTYPES = (bf16, np.dtype(np.float32))


def _ints(value) -> tuple[int, ...]:
    return tuple(int(v) for v in ((value,) if np.isscalar(value) else value))


@attrs.frozen
class StridedCopy(Operator):
    """Reads prod(sizes) elements of `x` along `sizes` and `strides`
    (elements, row-major, outermost first, up to 4 dimensions) starting at
    the per-call `in_offset`, and writes them contiguously into `y` starting
    at the per-call `out_offset`. `y` is INOUT: only that window is written
    (how one row lands in a KV-cache state). Bit-exact.

    The read is one shim buffer descriptor patched per call, so it must fit
    one descriptor's limits; offsets must keep both sides in range and
    4-byte aligned (checked per call, in the reference)."""

    input_buffer_size: int
    output_buffer_size: int
    sizes: tuple[int, ...] = attrs.field(converter=_ints)
    strides: tuple[int, ...] = attrs.field(converter=_ints)
    dtype: np.dtype = attrs.field(default=bf16, converter=as_dtype)
    in_offset: int = per_call(0)
    out_offset: int = per_call(0)

    host = "iron.ops.eltwise.host:strided_copy"  # the cpu backend's kernel
    cases = (
        # 16 rows of 64 out of a (16, 128) matrix
        Case({"input_buffer_size": 2048, "output_buffer_size": 1024,
              "sizes": (16, 64), "strides": (128, 1)}),
        # one position's keys (8 groups x 64) into a 16-position cache, per-call out_offset
        Case({"input_buffer_size": 512, "output_buffer_size": 8192,
              "sizes": (512,), "strides": (1,)}),
        # float32: every 4th element (a strided innermost dimension needs 4-byte elements)
        Case({"input_buffer_size": 1024, "output_buffer_size": 256,
              "sizes": (256,), "strides": (4,), "dtype": "float32"}),
    )  # fmt: skip

    @staticmethod
    def arg_spec(input_buffer_size, output_buffer_size, dtype):
        return [
            ArgSpec("x", (input_buffer_size,), dtype, IN),
            ArgSpec("y", (output_buffer_size,), dtype, INOUT),
        ]

    @property
    def count(self) -> int:
        """Elements copied per call."""
        return math.prod(self.sizes)

    def validate(self):
        require(
            type(self),
            f"dtype={dtype_name(self.dtype)}",
            self.dtype in DTYPES,
            f"one of {', '.join(dtype_name(d) for d in DTYPES)}",
        )
        require(self, "input_buffer_size", self.input_buffer_size >= 1, "at least 1 element")
        require(self, "output_buffer_size", self.output_buffer_size >= 1, "at least 1 element")
        require(
            self,
            "sizes",
            1 <= len(self.sizes) <= 4 and min(self.sizes) >= 1,
            "1 to 4 dimensions, each at least 1",
        )
        require(
            self,
            "strides",
            len(self.strides) == len(self.sizes) and min(self.strides) >= 0,
            f"one non-negative stride per dimension of sizes={self.sizes}",
        )
        last = reads_up_to(self.sizes, self.strides)
        require(
            self,
            "input_buffer_size",
            last < self.input_buffer_size,
            f"the pattern (sizes={self.sizes}, strides={self.strides}) reads up to element "
            f"{last}, past the input",
        )
        require(
            self,
            "output_buffer_size",
            self.count <= self.output_buffer_size,
            f"the pattern copies {self.count} elements; the output must hold them",
        )
        problem = bd_problem(self.sizes, self.strides, self.dtype.itemsize)
        require(
            self,
            "strides" if problem and "stride" in problem else "sizes",
            problem is None,
            f"the read pattern must fit one shim buffer descriptor (it is patched per call): "
            f"{problem}",
        )
        self._check_offsets(self.in_offset, self.out_offset)

    def check_call(self, *, in_offset, out_offset) -> None:
        self._check_offsets(in_offset, out_offset)

    def _check_offsets(self, in_offset, out_offset) -> None:
        """Per-call offsets keep both sides in range and 4-byte aligned."""
        in_offset, out_offset = int(in_offset), int(out_offset)
        last_read = in_offset + reads_up_to(self.sizes, self.strides)
        last_write = out_offset + self.count - 1
        if in_offset < 0 or last_read >= self.input_buffer_size:
            raise OperatorError(
                f"StridedCopy: in_offset={in_offset}: out of range: the pattern would read "
                f"up to element {last_read} of the {self.input_buffer_size}-element input"
            )
        if out_offset < 0 or last_write >= self.output_buffer_size:
            raise OperatorError(
                f"StridedCopy: out_offset={out_offset}: out of range: the copy would write "
                f"elements {out_offset} to {last_write} of the "
                f"{self.output_buffer_size}-element output"
            )
        per_word = WORD // self.dtype.itemsize
        for name, offset in (("in_offset", in_offset), ("out_offset", out_offset)):
            if offset % per_word:
                raise OperatorError(
                    f"StridedCopy: {name}={offset}: a DMA offset must be 4-byte aligned "
                    f"(a multiple of {per_word} {dtype_name(self.dtype)} elements)"
                )

    @staticmethod
    def design(input_buffer_size, output_buffer_size, sizes, strides, dtype, device):
        from iron.ops.eltwise import movers  # loads iron.design on first use

        # the per-call offsets are the design's runtime parameters of the same names
        return movers.strided_copy(
            input_buffer_size, output_buffer_size, sizes, strides, device, dtype
        )

    def reference(self, x, y, *, in_offset, out_offset):
        self._check_offsets(in_offset, out_offset)
        index = int(in_offset) + sum(
            np.arange(size).reshape((-1,) + (1,) * (len(self.sizes) - 1 - axis)) * stride
            for axis, (size, stride) in enumerate(zip(self.sizes, self.strides))
        )
        out = y.copy()
        out[int(out_offset) : int(out_offset) + self.count] = x[np.ravel(index)]
        return out

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()
