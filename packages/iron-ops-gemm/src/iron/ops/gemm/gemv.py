"""GEMV: y = A @ x, optionally over a batch of independent (A, x) pairs."""

from __future__ import annotations

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, Device, Operator, Tolerance, bf16, require, tunable
from iron.core.numerics import mean_abs, product_tolerance
from iron.design import (
    TAP,
    Acquire,
    Call,
    Design,
    Drain,
    Fill,
    Loop,
    Obj,
    ObjectFifo,
    Release,
    Tensor,
    Worker,
    core,
    forward,
    memtile,
    shim,
)
from iron.ops.gemm.common import (
    PRECISE,
    check_columns,
    check_core_memory,
    check_vector_reduction,
    most_columns,
    row_blocks,
)
from iron.ops.gemm.core_kernels import matvec_kernel
from iron.ops.gemm.tiling import iterations, rounds, stride_fits

#: a matvec core's stack
STACK_BYTES = 1024
#: float32 bytes of A the reference upcasts at once: A is read once, so a
#: block that stays in cache is fastest (1 MiB measured 2.3x faster than the
#: whole 128256 x 2048 head, and takes 1 MiB instead of 1 GiB)
UPCAST_BYTES = 1 << 20


def core_buffers(K: int, tile_size_input: int, tile_size_output: int) -> dict[str, int]:
    """Bytes one matvec core holds: rows of A and the output tile double
    buffered, the whole of x once, and the stack."""
    return {
        "A": 2 * tile_size_input * K * 2,
        "x": K * 2,
        "y": 2 * tile_size_output * 2,
        "stack": STACK_BYTES,
    }


def y_object_rows(tile_size_output: int) -> int:
    """Rows of y one transfer moves: a DMA moves whole 4-byte words, so an
    odd output tile travels in pairs."""
    return tile_size_output if tile_size_output % 2 == 0 else 2 * tile_size_output


@attrs.frozen
class GEMV(Operator):
    """y = A @ x: A (M, K), x (K,), y (M,); with num_batches > 1 each has a
    leading batch dimension, and with num_batches == 1 none at all. A
    weight as shipped, [out, in], is A as it is. float32 accumulation,
    one rounding to bf16.

    Each column takes M / num_aie_columns consecutive rows and produces them
    in tiles of tile_size_output rows, tile_size_input rows of A per kernel
    call, reducing K in 16-lane vectors."""

    M: int
    K: int
    num_batches: int = 1
    tile_size_input: int | None = tunable()
    tile_size_output: int | None = tunable()
    num_aie_columns: int | None = tunable()

    host = "iron.ops.gemm.host:gemv"  # the cpu backend's kernel
    host_steps = "iron.ops.gemm.host:gemv_steps"  # consecutive GEMVs sharing x: one launch
    cases = (
        Case({"M": 256, "K": 64, "num_aie_columns": 4}),
        Case({"M": 256, "K": 64, "num_batches": 4, "num_aie_columns": 4}),
        # a Llama down projection: two rows of A do not fit a core, so one row per call
        Case({"M": 2048, "K": 8192, "num_aie_columns": 4}),
        # a Llama gate projection as the decode graph tiles it: 8 columns, so npu2 only
        Case({"M": 8192, "K": 2048, "tile_size_input": 4, "tile_size_output": 1024,
              "num_aie_columns": 8}),
    )  # fmt: skip

    @staticmethod
    def arg_spec(M, K, num_batches, dtype=bf16):
        batch = (num_batches,) if num_batches > 1 else ()
        return [
            ArgSpec("A", (*batch, M, K), dtype, IN),
            ArgSpec("x", (*batch, K), dtype, IN),
            ArgSpec("y", (*batch, M), dtype, OUT),
        ]

    def validate(self):
        require(self, "M", self.M >= 1, "at least 1")
        require(self, "num_batches", self.num_batches >= 1, "at least 1")
        check_vector_reduction(self, "K", self.K)
        tile_in, tile_out = self.tile_size_input, self.tile_size_output
        require(self, "tile_size_input", tile_in is None or tile_in >= 1, "at least 1")
        require(self, "tile_size_output", tile_out is None or tile_out >= 1, "at least 1")
        if tile_in is not None and tile_out is not None:
            require(
                self,
                "tile_size_output",
                tile_out % tile_in == 0,
                f"a multiple of tile_size_input={tile_in} (an output tile is filled by whole "
                "kernel calls)",
            )
        check_columns(self, streams=2)  # A and x
        columns = self.num_aie_columns
        if columns is not None:
            require(
                self,
                "M",
                self.M % columns == 0,
                f"must split evenly over num_aie_columns={columns} (each column takes "
                "consecutive rows)",
            )
            rows = self.M // columns
            require(
                self,
                "tile_size_output",
                tile_out is None or rows % tile_out == 0,
                f"must divide the {rows} rows of each column (M / num_aie_columns)",
            )
            require(
                self,
                "tile_size_output",
                tile_out is None or rows % y_object_rows(tile_out) == 0,
                f"odd, so y moves two tiles per transfer (whole 4-byte words): twice it must "
                f"divide the {rows} rows of each column",
            )
        if tile_in is not None and tile_out is not None:
            check_core_memory(self, "tile_size_input", core_buffers(self.K, tile_in, tile_out))

    @staticmethod
    def design(
        M, K, num_batches, tile_size_input, tile_size_output, num_aie_columns, device
    ) -> Design:
        """Each column's core takes its M / num_aie_columns consecutive rows of
        A straight from its shim, tile_size_input rows per kernel call, and
        writes tile_size_output-row tiles of y back; x (one K vector per
        batch) enters once, at column 0, and its memtile broadcasts it to
        every core, which holds it for the batch."""
        columns, rows = num_aie_columns, M // num_aie_columns
        tile_in, tile_out = tile_size_input, y_object_rows(tile_size_output)
        matvec = matvec_kernel(tile_in, K, tile_out)
        workers, fifos, shim_column = [], [], {"x": 0}
        fifos.append(ObjectFifo("x", K, "bf16", shim(0), (memtile("x_broadcast"),)))
        cores = tuple(core(f"core_{c}", depth=1) for c in range(columns))
        fifos.append(ObjectFifo("x_cores", K, "bf16", memtile("x_broadcast"), cores))
        for c in range(columns):
            a, y = f"A{c}", f"y{c}"
            calls = []
            for j in range(tile_out // tile_in):
                call = Call(matvec, (Obj(a), Obj("x_cores"), Obj(y), j * tile_in))
                calls += [Acquire(a), call, Release(a)]
            tiles = Loop(rows // tile_out, (Acquire(y), *calls, Release(y)))
            workers.append(
                Worker(
                    f"core_{c}",
                    (Acquire("x_cores"), tiles, Release("x_cores")),
                    stack_size=STACK_BYTES,
                )
            )
            fifos += [
                ObjectFifo(a, tile_in * K, "bf16", shim(c), (core(f"core_{c}"),)),
                ObjectFifo(y, tile_out, "bf16", core(f"core_{c}"), (shim(c),)),
            ]
            shim_column |= {a: c, y: c}

        # batches are the patterns' iteration dimension (contiguous below it),
        # in rounds of at most the shim's iteration count; one a round where
        # a batch's A is past the shim's stride field
        per_round, _ = iterations(num_batches, device.shim_max_iterations)
        if not stride_fits(device, M * K, "bf16"):
            per_round = 1
        work = []
        for first in range(0, num_batches, per_round):
            tasks = [Fill("x", "x", TAP.linear(per_round * K, first * K))]
            for c in range(columns):
                start = first * M + c * rows
                a_tap = TAP(start * K, (per_round, 1, 1, rows * K), (M * K, 0, 0, 1))
                y_tap = TAP(start, (per_round, 1, 1, rows), (M, 0, 0, 1))
                tasks += [Fill(f"A{c}", "A", a_tap), Drain(f"y{c}", "y", y_tap)]
            work.append(tasks)
        batch = (num_batches,) if num_batches > 1 else ()
        return Design(
            f"gemv_{M}x{K}" + (f"x{num_batches}" if batch else ""),
            device,
            (
                Tensor("A", (*batch, M, K), "bf16", IN),
                Tensor("x", (*batch, K), "bf16", IN),
                Tensor("y", (*batch, M), "bf16", OUT),
            ),
            fifos=tuple(fifos),
            workers=tuple(workers),
            links=(forward("x_broadcast", "x", "x_cores"),),
            sequence=rounds(device, work, shim_column.__getitem__),
        )

    def tune(self, device: Device):
        tile_in, tile_out = self.tile_size_input, self.tile_size_output
        if tile_in is None:
            # two rows per call where they fit (and divide the output tile), else one
            pair_fits = sum(core_buffers(self.K, 2, tile_out or 2).values()) <= device.core_bytes
            tile_in = 2 if pair_fits and (tile_out or 2) % 2 == 0 else 1
        tile_out = tile_out or tile_in
        rows = y_object_rows(tile_out)
        columns = most_columns(device, lambda c: self.M % (c * rows) == 0, streams=2)
        return {
            "tile_size_input": tile_in,
            "tile_size_output": tile_out,
            "num_aie_columns": columns,
        }

    def reference(self, A, x):
        x = x.astype(np.float32)[..., None]
        y = np.empty(A.shape[:-1], np.float32)
        for rows in row_blocks(self.M, 4 * self.K * self.num_batches, UPCAST_BYTES):
            y[..., rows] = np.matmul(A[..., rows, :].astype(np.float32), x)[..., 0]
        return y.astype(bf16)

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """Relative 0.04 with an absolute floor of 2e-4 times the product's
        mass, K * mean|A| * mean|x| (the matvec multiplies bf16 into float32
        accumulators on every device), of `inputs` (A, x) when given, else
        of standard-normal inputs."""
        a, x = inputs if inputs is not None else (None, None)
        return product_tolerance(PRECISE, self.K, mean_abs(a), mean_abs(x))
