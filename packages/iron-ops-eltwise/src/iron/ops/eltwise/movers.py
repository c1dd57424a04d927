"""Designs of the data movers (MemCopy, StridedCopy, Repeat): DMA only, no
core kernel. Each lane is a fifo from a shim into a memtile link and a fifo
from the link back to the shim; the runtime access patterns do the work, so
the output is bit-exact by construction."""

from __future__ import annotations

import math
from collections.abc import Sequence

from iron.core import IN, INOUT, OUT, Device
from iron.design import TAP, Design, Drain, Fill, Link, ObjectFifo, Tensor, forward, memtile, shim
from iron.design.model import element_type

#: the largest object StridedCopy's one lane holds: double-buffered, half of
#: a memtile's 512 KiB (Device.memtile_bytes; a forward's two fifos share one
#: pool)
LANE_OBJECT_BYTES = 128 * 1024


def lane_object(count: int, itemsize: int) -> int:
    """Elements per object of a lane moving `count` elements: the largest
    divisor of `count` within LANE_OBJECT_BYTES that is whole 4-byte words
    (the DMA moves words)."""
    per_word = max(1, 4 // itemsize)
    cap = max(per_word, LANE_OBJECT_BYTES // itemsize)
    return next(n for n in range(min(count, cap), 0, -1) if count % n == 0 and n % per_word == 0)


def _lane(name: str, column: int, obj: int, dtype) -> tuple[tuple[ObjectFifo, ...], Link]:
    """The two fifos and the forward of one lane through column `column`'s memtile."""
    link = f"{name}_fwd"
    fifos = (
        ObjectFifo(f"{name}_in", (obj,), dtype, shim(column), (memtile(link),)),
        ObjectFifo(f"{name}_out", (obj,), dtype, memtile(link), (shim(column),)),
    )
    return fifos, forward(link, f"{name}_in", f"{name}_out")


def dma_design(
    name: str,
    device: Device,
    tensors: Sequence[Tensor],
    lanes: Sequence[tuple[int, int, TAP, TAP]],
    dtype,
) -> Design:
    """A design of DMA lanes: each (column, object elements, fill TAP of x,
    drain TAP of y) streams x through that column's memtile into y."""
    fifos, links, fills, drains = [], [], [], []
    for index, (column, obj, fill, drain) in enumerate(lanes):
        lane = f"lane{index}"
        pair, link = _lane(lane, column, obj, dtype)
        fifos += pair
        links.append(link)
        fills.append(Fill(f"{lane}_in", "x", fill))
        drains.append(Drain(f"{lane}_out", "y", drain, wait=True))
    return Design(name, device, tuple(tensors), tuple(fifos), (), (*fills, *drains), tuple(links))


def mem_copy(
    size: int, tile: int, columns: int, channels: int, device: Device, dtype="bf16"
) -> Design:
    """y = x: one lane per (column, channel), each a contiguous share moved
    in `tile`-element objects."""
    lanes_total = columns * channels
    share = size // lanes_total
    lanes = [
        (k // channels, tile, TAP.linear(share, k * share), TAP.linear(share, k * share))
        for k in range(lanes_total)
    ]
    tensors = (Tensor("x", (size,), dtype, IN), Tensor("y", (size,), dtype, OUT))
    return dma_design("mem_copy", device, tensors, lanes, dtype)


def strided_copy(
    input_size: int,
    output_size: int,
    sizes: Sequence[int],
    strides: Sequence[int],
    in_offset: int,
    out_offset: int,
    device: Device,
    dtype,
) -> Design:
    """The gather is the fill's access pattern; the drain writes the window
    of y contiguously. y is INOUT: elements outside the window are never
    written."""
    count = math.prod(sizes)
    obj = lane_object(count, element_type(dtype).nbytes)
    lane = (0, obj, TAP(in_offset, sizes, strides), TAP.linear(count, out_offset))
    tensors = (Tensor("x", (input_size,), dtype, IN), Tensor("y", (output_size,), dtype, INOUT))
    return dma_design("strided_copy", device, tensors, [lane], dtype)


def repeat(
    rows: int, cols: int, times: int, split: tuple[int, int], device: Device, dtype
) -> Design:
    """np.repeat on rows: the fill reads x `times` over (its outermost
    stride 0) and the drain interleaves the copies; a row moves as `split`
    (count, run), one object per run (at most 1023 words: any row fits a
    memtile)."""
    count, run = split
    sizes = (times, rows, count, run)
    fill = TAP(0, sizes, (0, cols, run, 1))
    drain = TAP(0, sizes, (cols, cols * times, run, 1))
    tensors = (
        Tensor("x", (rows, cols), dtype, IN),
        Tensor("y", (rows * times, cols), dtype, OUT),
    )
    return dma_design("repeat", device, tensors, [(0, run, fill, drain)], dtype)
