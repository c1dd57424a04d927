"""ChunkCopy: copy the first n chunks of a fixed size, n given per call."""

from __future__ import annotations

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
from iron.ops.eltwise.common import WORD

DTYPES = (bf16, np.dtype(np.float32))
#: a chunk is one object of the lane's memtile fifo: double-buffered, half
#: of a memtile (movers.LANE_OBJECT_BYTES)
MAX_CHUNK_BYTES = 128 * 1024


@attrs.frozen
class ChunkCopy(Operator):
    """y[:n * chunk] = x[:n * chunk]: `n` chunks of `chunk` elements, where
    n (1 to `max_chunks`) is a dispatch-time value given per call; the rest
    of `y` (INOUT) keeps its contents. One device image serves every n:
    only the runtime sequence (how many chunks the shim moves) is made per
    n. Bit-exact."""

    chunk: int
    max_chunks: int
    dtype: np.dtype = attrs.field(default=bf16, converter=as_dtype)
    n: int = per_call(1)

    host = "iron.ops.eltwise.host:chunk_copy"  # the cpu backend's kernel
    cases = (
        Case({"chunk": 256, "max_chunks": 16}),
        Case({"chunk": 1024, "max_chunks": 4, "dtype": "float32"}),
    )

    @staticmethod
    def arg_spec(chunk, max_chunks, dtype):
        return [
            ArgSpec("x", (max_chunks * chunk,), dtype, IN),
            ArgSpec("y", (max_chunks * chunk,), dtype, INOUT),
        ]

    def validate(self):
        require(
            type(self),
            f"dtype={dtype_name(self.dtype)}",
            self.dtype in DTYPES,
            f"one of {', '.join(dtype_name(d) for d in DTYPES)}",
        )
        nbytes = self.chunk * self.dtype.itemsize
        require(
            self,
            "chunk",
            self.chunk >= 1 and nbytes % WORD == 0 and nbytes <= MAX_CHUNK_BYTES,
            f"whole {WORD}-byte DMA words, at most {MAX_CHUNK_BYTES} bytes (one memtile object)",
        )
        require(self, "max_chunks", self.max_chunks >= 1, "at least 1")
        self.check_call(n=self.n)

    def check_call(self, *, n: int) -> None:
        """Refuse a call's n before anything runs."""
        if not 1 <= int(n) <= self.max_chunks:
            raise OperatorError(
                f"ChunkCopy: n={int(n)}: between 1 and max_chunks={self.max_chunks} chunks"
            )

    @staticmethod
    def design(chunk, max_chunks, dtype, n, device):
        from iron.ops.eltwise import movers  # loads iron.design on first use

        return movers.chunk_copy(chunk, max_chunks, n, device, dtype)

    def sequence(self, *, n: int):
        """The runtime sequence at `n` chunks, over the same configuration
        (one lane, a chunk per object): the shim moves n chunks."""
        self.check_call(n=n)
        return self.design(self.chunk, self.max_chunks, self.dtype, n, self.device).sequence

    def reference(self, x, y, *, n):
        self.check_call(n=n)
        out = y.copy()
        out[: int(n) * self.chunk] = x[: int(n) * self.chunk]
        return out

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()
