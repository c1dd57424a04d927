"""What several eltwise operators share: how their work spreads over the
array within the shim DMA budget, the limits of one shim buffer descriptor,
the tolerance classes, and the flat elementwise shapes (`Unary`, `Binary`).

An operator runs on num_aie_columns x num_channels cores, one per (column,
channel), each taking the same whole number of lines or rows. Every core
moves its own streams through the shim, so a column costs (streams per core x
channels) of the device's shim DMA budget (`Device.shim_dma_limit`); the
default column count is the largest that divides the work and fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import attrs

from iron.core import (
    Case,
    Device,
    Operator,
    Tolerance,
    require,
    same_shape_binary,
    same_shape_unary,
    tunable,
)

# ---- array limits -------------------------------------------------------------------

#: the line an elementwise core streams when none is given: divides most extents
DEFAULT_TILE = 256
#: the longest elementwise line: input and output double-buffered take 32 KiB of
#: a core's 64 KiB
LINE_CAP = 4096
#: the longest row a row-wise kernel (norms, softmax, RoPE) holds whole: 16 KiB
#: of bf16, one memory bank per buffer
ROW_CAP = 8192
#: cores per column: a shim tile has two DMA channels each way
MAX_CHANNELS = 2
#: the sized activation kernels (kernels/{aie2,aie2p}/activation.cc) walk whole
#: 16-lane vectors, so a line is a multiple of 16
ACTIVATION_STEP = 16

# ---- shim buffer descriptor limits (AIEX verifyStridesWraps, BdLowering.h) -----------

WORD = 4  # bytes: the shim DMA's address granularity
BD_WRAP = 1023  # 10-bit wrap fields: d0 (counted in words) and d1
BD_ITERATIONS = 64  # the 6-bit iteration wrap of the outermost dimension
BD_STRIDE_WORDS = 1 << 20  # 20-bit stride fields, counted in words


def default_array(
    op: Operator, device: Device, units: int, *, streams: int = 1, replicated: int = 0
) -> dict:
    """`num_channels` (1 unless given) and `num_aie_columns`: the most columns
    the device's shim budget allows whose cores split `units` (lines, rows,
    tiles) evenly; 1 when none does (validation then says why)."""
    channels = op.num_channels or 1
    most = device.shim_columns(streams, channels, replicated)
    columns = next((c for c in range(most, 0, -1) if units % (c * channels) == 0), 1)
    return {"num_channels": channels, "num_aie_columns": columns}


def check_array(
    op: Operator,
    parameter: str,
    units: int | None,
    unit: str,
    *,
    streams: int = 1,
    replicated: int = 0,
) -> None:
    """The rules of `num_aie_columns` and `num_channels`: each core takes the
    same whole number of `units` (the work `parameter` describes; None when
    not yet known), and the columns fit the device and its shim DMA budget
    at `streams` streams per core plus `replicated` streams shared by all."""
    columns, channels = op.num_aie_columns, op.num_channels
    require(
        op,
        "num_channels",
        channels is None or 1 <= channels <= MAX_CHANNELS,
        f"1 to {MAX_CHANNELS} cores per column (a shim tile has {MAX_CHANNELS} DMA channels "
        "each way)",
    )
    require(op, "num_aie_columns", columns is None or columns >= 1, "at least 1")
    if units is not None and columns is not None and channels is not None:
        cores = columns * channels
        require(
            op,
            parameter,
            units % cores == 0,
            f"{units} {unit} must split evenly over {cores} cores "
            f"(num_aie_columns={columns} x num_channels={channels})",
        )
    if op.device is None or columns is None:
        return
    problem = op.device.shim_budget_problem(columns, streams, channels or 1, replicated)
    require(op, "num_aie_columns" if columns > 1 else "num_channels", problem is None, problem)


def check_row(op: Operator, parameter: str, length: int) -> None:
    """A row-wise kernel's row: held whole in one core, moved in 4-byte words."""
    require(
        op,
        parameter,
        2 <= length <= ROW_CAP and length % 2 == 0,
        f"an even number of elements, at most {ROW_CAP} (a row is one kernel call held "
        "whole in a core's memory; the DMA moves 4-byte words)",
    )


def bd_problem(sizes: Sequence[int], strides: Sequence[int], itemsize: int) -> str | None:
    """Why one shim buffer descriptor cannot walk this access pattern, or
    None when it can. `sizes` and `strides` count elements of `itemsize`
    bytes (1, 2 or 4), outermost first, at most four dimensions: mlir-aie's
    [d3, d2, d1, d0], d0 innermost and d3 the iteration count. A pattern
    patched per call (an offset) must fit one descriptor: it cannot be split."""
    per_word = WORD // itemsize
    if len(sizes) > 4:
        return f"{len(sizes)} dimensions; a buffer descriptor has at most 4"
    total = math.prod(sizes)
    if total * itemsize % WORD:
        return f"{total} elements of {itemsize} bytes are not a whole number of 4-byte words"
    if _contiguous(sizes, strides):
        return None  # linear mode: one 32-bit length, no wrap limits
    dims = ((1, 0),) * (4 - len(sizes)) + tuple(zip(sizes, strides))
    (d3, _), _, (d1, _), (d0, d0_stride) = dims
    if d0 > 1 and d0_stride != 1 and per_word > 1:
        return (
            f"the d0 (innermost) stride is {d0_stride}: the DMA moves whole 4-byte words, so "
            f"with {itemsize}-byte elements it must be 1"
        )
    if d0 % per_word:
        return f"d0 (innermost, {d0} elements) is not a whole number of 4-byte words"
    if d0 // per_word > BD_WRAP:
        return (
            f"d0 (innermost) is {d0 // per_word} 4-byte words; at most {BD_WRAP} unless the "
            "whole transfer is contiguous"
        )
    if d1 > BD_WRAP:
        return f"d1 ({d1}) exceeds its {BD_WRAP} wrap"
    if d3 > BD_ITERATIONS:
        return f"d3 (outermost, {d3}) is the iteration count: at most {BD_ITERATIONS}"
    for name, (size, stride) in zip(("d3", "d2", "d1", "d0"), dims):
        if size == 1:
            continue
        if stride == 0 and name != "d3":
            return f"the {name} stride is 0; only d3 (outermost) may be"
        if name != "d0" and stride * itemsize % WORD:
            return f"the {name} stride ({stride} elements) is not a whole number of 4-byte words"
        if stride * itemsize // WORD > BD_STRIDE_WORDS:
            return (
                f"the {name} stride is {stride * itemsize // WORD} 4-byte words; "
                f"at most {BD_STRIDE_WORDS} (20 bits)"
            )
    return None


def _contiguous(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    expected = 1
    for size, stride in reversed(list(zip(sizes, strides))):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def reads_up_to(sizes: Sequence[int], strides: Sequence[int]) -> int:
    """The last element index a pattern reads, counted from its offset."""
    return sum((size - 1) * stride for size, stride in zip(sizes, strides))


# ---- tolerances ----------------------------------------------------------------------

#: no arithmetic rounds (max, clip): values must match; signed zeros may differ
VALUE_EXACT = Tolerance.relative(0.0)
#: one bf16 rounding of a float32 result: the core computes in its float32
#: accumulator and rounds once on the store, within 2^-8 of the result whether
#: it rounds to nearest or truncates
ROUNDED = Tolerance.relative(2**-8)


def approximated(device: Device | None, kernel_atol: float = 0.0) -> Tolerance:
    """exp, tanh, and the inverse square root as the cores evaluate them.
    aie2p: IRON's device tests pass these kernels at |a - e| < 0.04 (|a| +
    |e|), which bounds |a - e| by 0.04 * 2 / (1 - 0.04) = 8.3% of |e|. aie2
    uses mlir-aie's lookup-table kernels, held to mlir-aie's convention for
    bf16 LUT kernels, rtol 0.128; an unknown device gets that looser bound.
    atol 1e-6 forgives results that underflow near zero, as IRON's tests
    do, or `kernel_atol` where a kernel's bf16 steps need more in the tails
    (an operator's measured figure)."""
    atol = max(kernel_atol, 1e-6)
    if device is not None and device.arch == "aie2p":
        return Tolerance.relative(0.04 * 2 / (1 - 0.04), atol=atol)
    return Tolerance.relative(0.128, atol=atol)


# ---- the flat elementwise shapes ---------------------------------------------------------


@attrs.frozen
class Elementwise(Operator):
    """`size` elements streamed as lines of `tile_size` through one core per
    (column, channel), each core taking the same whole number of lines.
    Subclasses give the shape rule, the reference and the tolerance;
    `inputs` is how many flat inputs each core streams."""

    size: int
    num_aie_columns: int | None = tunable()
    num_channels: int | None = tunable()
    tile_size: int | None = tunable()

    inputs: ClassVar[int] = 1

    def validate(self) -> None:
        require(
            self,
            "size",
            self.size >= 2 and self.size % 2 == 0,
            "an even number of elements (the DMA moves 4-byte words)",
        )
        tile, lines = self.tile_size, None
        if tile is not None:
            require(
                self,
                "tile_size",
                2 <= tile <= LINE_CAP and tile % 2 == 0,
                f"an even number of elements, at most {LINE_CAP} (one core's line; the DMA "
                "moves 4-byte words)",
            )
            require(self, "size", self.size % tile == 0, f"a whole number of {tile}-element lines")
            lines = self.size // tile
        check_array(self, "size", lines, f"lines of {tile}", streams=self.inputs)

    def tune(self, device: Device) -> dict:
        tile = self.tile_size or min(DEFAULT_TILE, self.size)
        return {
            "tile_size": tile,
            **default_array(self, device, self.size // tile, streams=self.inputs),
        }


@attrs.frozen
class Unary(Elementwise):
    """x -> y, both `size` elements."""

    arg_spec = staticmethod(same_shape_unary)


@attrs.frozen
class Activation(Unary):
    """A unary operator whose core runs one of the activation kernels (see
    `iron.ops.eltwise.line_kernels.activation_kernel`): its lines are whole
    vectors of the kernel. A subclass names its kernel in `kernel_name`
    ("gelu", "silu"...)."""

    kernel_name = ""

    @classmethod
    def design(cls, size, tile_size, num_aie_columns, num_channels, device):
        from iron.ops.eltwise.line_kernels import activation_kernel  # loads iron.design
        from iron.ops.eltwise.streaming import elementwise_design

        return elementwise_design(
            cls.kernel_name,
            device,
            "x y",
            size=size,
            tile=tile_size,
            columns=num_aie_columns,
            channels=num_channels,
            kernel=activation_kernel(cls.kernel_name, tile_size, device.arch),
        )

    def validate(self) -> None:
        super().validate()
        require(
            self,
            "tile_size",
            self.tile_size is None or self.tile_size % ACTIVATION_STEP == 0,
            f"a multiple of {ACTIVATION_STEP} (the activation kernels walk whole "
            f"{ACTIVATION_STEP}-lane vectors)",
        )


@attrs.frozen
class Binary(Elementwise):
    """(a, b) -> y, all `size` elements: two input streams per core."""

    inputs: ClassVar[int] = 2
    arg_spec = staticmethod(same_shape_binary)


#: the cases the flat elementwise operators declare: the defaults (4 lines,
#: the same 4 columns on npu1 and npu2), and pinned tunables at two channels
ELEMENTWISE_CASES = (
    Case({"size": 1024}),
    Case({"size": 8192, "num_aie_columns": 2, "num_channels": 2, "tile_size": 1024}),
)
