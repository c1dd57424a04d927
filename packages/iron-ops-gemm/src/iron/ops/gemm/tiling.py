"""Design helpers the family's designs share: the matmul kernels' mmul
shapes, the memtile reorders that lay a row-major tile out in the blocks a
kernel reads (mlir-aie's dims_to_stream), runtime access patterns that keep
within a shim descriptor, and the grouping of runtime tasks into rounds.
"""

from __future__ import annotations

from collections import Counter

import attrs

from iron.core import Device, as_dtype, bf16
from iron.design import TAP, Finish
from iron.design.model import element_type


def mmul_shape(arch: str | None, dtype_in) -> tuple[int, int, int]:
    """(r, s, t) of the aie::mmul blocks mlir-aie's mm.cc builds its matmul
    from, for bf16 or int8 in (`combos` in aie_kernels/aie2/mm.cc and
    aie2p/mm.cc):

    - aie2 (npu1): bf16 4x8x4, int8 4x8x8;
    - aie2p (npu2): bf16 8x8x8 (emulated through bfp16), int8 8x8x8.

    Before the architecture is known (None): 4x8x4 for bf16, 4x8x8 for int8."""
    integer = as_dtype(dtype_in) != bf16
    if arch == "aie2p":
        return (8, 8, 8)
    return (4, 8, 8) if integer else (4, 8, 4)


# ---- memtile reorders (dims_to_stream), highest dimension first ----------------------------


def blocked(rows: int, cols: int, r: int, c: int) -> tuple[tuple[int, int], ...]:
    """Read a row-major (rows, cols) object as (rows/r, cols/c) blocks of
    r x c, blocks and their elements row-major."""
    return ((rows // r, r * cols), (cols // c, c), (r, cols), (c, 1))


def unblocked_rows(rows: int, cols: int, r: int, t: int) -> tuple[tuple[int, int], ...]:
    """Read an object of r x t blocks (row-major, as `blocked` writes them)
    back as a row-major (rows, cols) matrix."""
    return ((rows // r, r * cols), (r, t), (cols // t, r * t), (t, 1))


def columns_of_row_blocks(m: int, n: int, r: int, t: int) -> tuple[tuple[int, int], ...]:
    """Read an (m, n) tile held as r x t blocks, blocks and elements
    row-major (as `blocked` writes them), as columns: for each of its n
    columns, its m values in order (one element per step: 4-byte elements
    only, a DMA moves whole words)."""
    return ((n // t, r * t), (t, 1), (m // r, r * n), (r, t))


def unblocked_cols(m: int, n: int, r: int, t: int) -> tuple[tuple[int, int], ...]:
    """Read an (m, n) tile held as t x r blocks ordered along n first
    (mm.cc's column-major C) as columns: for each of its n columns, its m
    values in order."""
    return ((n // t, m * t), (t, r), (m // r, r * t), (r, 1))


# ---- runtime access patterns ------------------------------------------------------------------


def stride_fits(device: Device, stride: int, dtype: str) -> bool:
    """Whether a runtime pattern's stride of `stride` elements fits a shim
    BD's stride field (in 32-bit words; `Device.shim_stride_bits`)."""
    words = stride * element_type(dtype).nbytes // device.dma_granule
    return words <= device.limits("shim").max_stride


def iterations(count: int, most: int) -> tuple[int, int]:
    """`count` as (outer, inner) with outer <= `most` (a shim BD's iteration
    count) and outer x inner = count: the largest such outer divisor."""
    outer = max(d for d in range(1, min(count, most) + 1) if count % d == 0)
    return outer, count // outer


# ---- the runtime sequence -----------------------------------------------------------------------


def rounds(device: Device, design_rounds, shim_of) -> tuple:
    """The runtime sequence of `design_rounds` (lists of Fill and Drain
    tasks, one list per round): each round its own group. While a round's
    tasks take at most half of each channel's queue and of each shim's BDs,
    two rounds are live at once (the next is issued before the last
    finishes), so the device never waits for the host between rounds;
    otherwise each round finishes before the next begins. `shim_of(fifo)`
    names the shim column a fifo's runtime end is pinned to."""
    per_channel = max((max(Counter(t.fifo for t in r).values()) for r in design_rounds), default=0)
    per_shim = max(
        (max(Counter(shim_of(t.fifo) for t in r).values()) for r in design_rounds), default=0
    )
    overlap = (
        per_channel <= device.task_queue_depth // 2 and per_shim <= device.bd_ids_per_shim // 2
    )
    sequence = []
    for index, tasks in enumerate(design_rounds):
        group = f"round{index}"
        sequence += [attrs.evolve(task, group=group) for task in tasks]
        if not overlap:
            sequence.append(Finish(group))
        elif index:
            sequence.append(Finish(f"round{index - 1}"))
    if overlap and design_rounds:
        sequence.append(Finish(f"round{len(design_rounds) - 1}"))
    return tuple(sequence)


# ---- KV caches ----------------------------------------------------------------------------------

#: cache positions per object of the decode designs, at most: 64 rows of a
#: group's 64-wide heads are 8 KiB of bf16
CACHE_CHUNK = 64


def cache_chunk(max_seq_len: int, position_bytes: int, held_bytes: int, budget: int) -> int | None:
    """Positions per cache object: the largest even divisor of max_seq_len up
    to CACHE_CHUNK (even: a chunk of bf16 scores is whole 4-byte words) for
    which a core's `held_bytes` and `position_bytes` per position fit its
    `budget`; None when not even two positions fit."""
    fits = [
        p
        for p in range(2, CACHE_CHUNK + 1, 2)
        if max_seq_len % p == 0 and held_bytes + p * position_bytes <= budget
    ]
    return max(fits, default=None)


def cache_rows(device: Device, start, positions, chunk, row, width) -> TAP:
    """A (positions, row)-strided cache read `width` contiguous elements per
    position, `chunk` positions per object: the chunks split as (outer,
    inner) so the shim's iteration count holds the outer part."""
    outer, inner = iterations(positions // chunk, device.shim_max_iterations)
    return TAP(start, (outer, inner, chunk, width), (inner * chunk * row, chunk * row, row, 1))


def chunked_columns(device: Device, start, rows, row, positions, chunk) -> TAP:
    """`rows` rows of a (., row) matrix, `chunk` columns at a time: each
    object is rows x chunk, chunks left to right."""
    outer, inner = iterations(positions // chunk, device.shim_max_iterations)
    return TAP(start, (outer, inner, rows, chunk), (inner * chunk, chunk, row, 1))
