"""Designs of the data movers. MemCopy, StridedCopy and Repeat are DMA only:
each lane is a fifo from a shim into a memtile link and a fifo from the link
back to the shim, and the runtime access patterns do the work. Transpose
needs a core only to swap the bf16 halves of DMA words (our
iron_transpose_8x8_bf16 moves bits); its memtile's 4-D pattern does the rest.
Every output is bit-exact by construction."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from iron.core import IN, INOUT, OUT, Device
from iron.design import (
    TAP,
    Acquire,
    Call,
    Design,
    Drain,
    Fill,
    Kernel,
    Link,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    Release,
    Tensor,
    Tile,
    Worker,
    core,
    forward,
    memtile,
    shim,
    shipped,
)
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
    offset_params: tuple[str | None, str | None] = (None, None),
) -> Design:
    """A design of DMA lanes: each (column, object elements, fill TAP of x,
    drain TAP of y) streams x through that column's memtile into y.
    `offset_params` names the runtime parameters added to the fill's and the
    drain's offsets (None: none)."""
    fifos, links, fills, drains = [], [], [], []
    fill_offset, drain_offset = offset_params
    for index, (column, obj, fill, drain) in enumerate(lanes):
        lane = f"lane{index}"
        pair, link = _lane(lane, column, obj, dtype)
        fifos += pair
        links.append(link)
        fills.append(Fill(f"{lane}_in", "x", fill, offset_param=fill_offset))
        drains.append(Drain(f"{lane}_out", "y", drain, wait=True, offset_param=drain_offset))
    # each offset parameter carries the operator's per-call member of its name
    params = tuple(Param(p, member=p) for p in offset_params if p is not None)
    return Design(
        name, device, tuple(tensors), tuple(fifos), (), (*fills, *drains), tuple(links),
        params=params,
    )  # fmt: skip


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
    device: Device,
    dtype,
) -> Design:
    """The gather is the fill's access pattern; the drain writes the window
    of y contiguously. y is INOUT: elements outside the window are never
    written. The per-call offsets are the runtime parameters `in_offset` and
    `out_offset`, added to the two transfers' addresses, so one design
    serves every call (a decode step's cache row)."""
    count = math.prod(sizes)
    obj = lane_object(count, element_type(dtype).nbytes)
    lane = (0, obj, TAP(0, sizes, strides), TAP.linear(count))
    tensors = (Tensor("x", (input_size,), dtype, IN), Tensor("y", (output_size,), dtype, INOUT))
    return dma_design(
        "strided_copy", device, tensors, [lane], dtype, offset_params=("in_offset", "out_offset")
    )


def chunk_copy(chunk: int, max_chunks: int, n: int, device: Device, dtype) -> Design:
    """The first `n` chunks of x into y through one lane whose object is a
    chunk: the configuration holds no n, the sequence moves n objects."""
    size = chunk * max_chunks
    lane = (0, chunk, TAP.linear(n * chunk), TAP.linear(n * chunk))
    tensors = (Tensor("x", (size,), dtype, IN), Tensor("y", (size,), dtype, INOUT))
    return dma_design("chunk_copy", device, tensors, [lane], dtype)


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


# ---- Transpose: the DMA moves 8-element runs, a core transposes within 8 x 8 blocks ----

#: the kernel's block side: a block row of 8 bf16 is 16 bytes, whole DMA words
BLOCK = 8


def transpose_blocks_model(rows: int, cols: int, src, dst) -> None:
    """iron_transpose_8x8_bf16 (kernels/transpose.cc): every 8 x 8 block of a
    rows x cols tile transposed in place; it moves bits."""
    blocks = src.reshape(rows // BLOCK, BLOCK, cols // BLOCK, BLOCK)
    dst[:] = blocks.transpose(0, 3, 2, 1).reshape(-1)


def transpose_kernel(rows: int, cols: int) -> Kernel:
    """iron_transpose_8x8_bf16(bf16 *in, bf16 *out), built for a rows x cols
    tile (DIM_n rows, DIM_m columns). Ours: mlir-aie's generic/transpose.cc
    is not in the tree at iron-design's pin."""
    tile = Memref((rows * cols,), "bf16")
    return Kernel(
        "iron_transpose_8x8_bf16",
        (tile, tile),
        shipped("iron.ops.eltwise", "kernels/transpose.cc"),
        functools.partial(transpose_blocks_model, rows, cols),
        flags=(f"-DDIM_m={cols}", f"-DDIM_n={rows}"),
    )


def transpose(
    M: int, N: int, tile_m: int, tile_n: int, columns: int, channels: int, device: Device
) -> Design:
    """y (N, M) = x.T. Core (column c, channel h) takes rows h * M/channels
    and columns c * N/columns of x as tile_m x tile_n tiles: its fill reads
    them row by row, the kernel transposes each 8 x 8 block in place, and
    its memtile's 4-D pattern sends the tile's block rows in the order of
    the transposed tile (bf16 pairs share a DMA word, so access patterns
    alone cannot move single elements); the drain writes it into y."""
    tm, tn = tile_m, tile_n
    tile = tm * tn
    blocks = (M // channels // tm, N // columns // tn)
    # x and the kernel's output double-buffered unless four tiles and the stack
    # exceed a core's memory (8192-element tiles: one each)
    depth = 2 if 4 * tile * 2 + device.core_stack_bytes <= device.core_bytes else 1
    # stream order of the transposed tile: column block J, row in block, row
    # block I, then the 8 elements of that block row (whole 16-byte runs)
    transposed = ((tn // BLOCK, BLOCK), (BLOCK, tn), (tm // BLOCK, BLOCK * tn), (BLOCK, 1))
    kernel = transpose_kernel(tm, tn)
    fifos, workers, links, fills, drains = [], [], [], [], []
    for k in range(columns * channels):
        column, channel = divmod(k, channels)
        x, t, y, worker, link = f"x{k}", f"t{k}", f"y{k}", f"core{k}", f"out{k}"
        fifos += [
            ObjectFifo(x, (tile,), "bf16", shim(), (core(worker),), depth=depth),
            ObjectFifo(t, (tile,), "bf16", core(worker), (memtile(link),), depth=depth),
            ObjectFifo(y, (tile,), "bf16", memtile(link), (shim(),), dims_to_stream=transposed),
        ]
        links.append(forward(link, t, y))
        body = (Acquire(x), Acquire(t), Call(kernel, (Obj(x), Obj(t))), Release(x), Release(t))
        workers.append(
            Worker(worker, (Loop(blocks[0] * blocks[1], body),), tile=Tile(column, 2 + channel))
        )
        row0, col0 = channel * (M // channels), column * (N // columns)
        fills.append(Fill(x, "x", TAP(row0 * N + col0, (*blocks, tm, tn), (tm * N, tn, N, 1))))
        drains.append(
            Drain(y, "y", TAP(col0 * M + row0, (*blocks, tn, tm), (tm, tn * M, M, 1)), wait=True)
        )
    tensors = (Tensor("x", (M, N), "bf16", IN), Tensor("y", (N, M), "bf16", OUT))
    return Design(
        "transpose", device, tensors, tuple(fifos), tuple(workers), (*fills, *drains), tuple(links)
    )
