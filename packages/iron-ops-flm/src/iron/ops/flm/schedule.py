"""The per-shape program of `FLMGemm`, as plain data.

The image (one per configuration) fixes the array: 4 compute rows x
`device.columns` columns; A reaches each core row through a memtile
ObjectFifo and is broadcast along the row; C is joined per column in the
memtile. B has no ObjectFifo: a fifo's memtile descriptors are device
configuration and would bake K and M into the shared image. Instead every
column's memtile holds a pool of k-block slots, each with a producer and a
consumer lock, and the per-shape program arms it:

- a *unit* is one row block of 64 x compute_rows rows of A and C;
- M is cut into *slabs* of units. A slab is *resident* when its k-blocks fit
  the pool and its units fit a lock's range: DDR reads each column block of
  B once and the memtile replays it to every unit. Otherwise it is
  *streamed*: the pool turns over like a fifo and B is read once per unit;
- for each slab: one A transfer per row per column block, and per column one
  B and one C transfer per column block it works on, two memtile tasks (the
  fill from the shim, the drain to the column's cores) with their lock
  operations, pushed in pieces of at most `max_repeat_count` passes, and the
  runtime parameters (RTP words) the cores read.

Every limit comes from the `Device`; the only constants here are the
kernel's geometry and B_MAX_SLOTS (how many memtile BDs the compiler leaves
the pool, its choice rather than the target model's).
"""

from __future__ import annotations

import itertools
import math

import attrs
import numpy as np

from iron.core import Device
from iron.ops.flm.packing import GROUP, K_BLOCK, BFormat, packed_b_size

M_TILE = 64  # C rows one core accumulates
K_TILE = K_BLOCK  # k per A object and per B slot
M_CHUNK = 1  # row blocks per unit; >1 must divide M/256, which would fork the image
A_DEPTH = C_DEPTH = 2  # memtile fifo depths of A and C
B_MAX_SLOTS = 8
#: k held in L1 per core for each tile_n: the only pairs verified on hardware
#: (others build, run and miscompute silently: ct_k=64 at tile_n=64 gave
#: err/mass 3.45e-2, tile_n=128 with another ct_k gave NaNs)
CT_K_FOR_TILE_N = {16: 16, 32: 32, 64: 128, 128: 32}


@attrs.frozen
class Pool:
    """One column's memtile budget: A's and C's fifos, then B's slots."""

    slots: int
    slot_elems: int  # elements of B's buffer per slot: bfp16 blocks or bf16 values
    slot_bytes: int
    a_bytes: int
    c_bytes: int
    memtile_bytes: int

    @property
    def free_bytes(self) -> int:
        return self.memtile_bytes - self.a_bytes - self.c_bytes - self.slots * self.slot_bytes


def memtile_pool(device: Device, tile_n: int, b_format: BFormat) -> Pool:
    """B_SLOTS = min(8, (memtile - A_DEPTH*m_chunk*64*512*2 - C_DEPTH*64*tile_n*rows*2)
    // slot_bytes), slot_bytes = 512*tile_n*(9/8 for bfp16, 2 for bf16)."""
    b_format = BFormat(b_format)
    values = K_TILE * tile_n
    slot_bytes = packed_b_size(K_TILE, tile_n, b_format)
    a_bytes = A_DEPTH * M_CHUNK * M_TILE * K_TILE * 2
    c_bytes = C_DEPTH * M_TILE * tile_n * device.compute_rows * 2
    slots = max(0, min(B_MAX_SLOTS, (device.memtile_bytes - a_bytes - c_bytes) // slot_bytes))
    slot_elems = values // GROUP if b_format is BFormat.BFP16 else values
    return Pool(slots, slot_elems, slot_bytes, a_bytes, c_bytes, device.memtile_bytes)


@attrs.frozen
class Transfer:
    """One shim DMA task between a DDR buffer and a stream: the elements at
    offset + sum(i[d] * strides[d]) for every index i over `sizes`,
    outermost dimension first (elements of the buffer's type: bf16 values
    for A and C, bfp16 blocks or bf16 values for B)."""

    name: str
    offset: int
    sizes: tuple[int, ...] = attrs.field(converter=tuple)
    strides: tuple[int, ...] = attrs.field(converter=tuple)

    @property
    def elements(self) -> int:
        return math.prod(self.sizes)


@attrs.frozen
class LockOp:
    """A lock operation on one slot's `prod` or `cons` lock. In a BD's
    acquire: wait until the lock holds at least `value`, then take `value`;
    in its release: add `value`; in a slab's arm: set the lock to `value`."""

    lock: str  # "prod" | "cons"
    slot: int
    value: int


@attrs.frozen
class SlotBd:
    """One memtile BD of a B task: moves `size` elements at `offset` of the
    pool buffer (into it for the fill, out of it for the drain)."""

    slot: int
    offset: int
    size: int
    acquire: LockOp
    release: LockOp


@attrs.frozen
class Push:
    """One push of a memtile task onto its channel's queue, issued at the
    column's `block`-th column block: `repeat_count` passes over the BD chain
    (1..max_repeat_count)."""

    block: int
    repeat_count: int


@attrs.frozen
class MemtileTask:
    """A chain of slot BDs walked once per pass, over all its pushes."""

    name: str
    bds: tuple[SlotBd, ...] = attrs.field(converter=tuple)
    pushes: tuple[Push, ...] = attrs.field(converter=tuple)


@attrs.frozen
class ColumnProgram:
    """What one column does in one slab: the column blocks it works on (the
    others it only drains A for), the pool locks armed before its tasks run,
    its B and C transfers (one per column block) and its two B tasks."""

    column: int
    blocks: tuple[int, ...] = attrs.field(converter=tuple)
    arm: tuple[LockOp, ...] = attrs.field(converter=tuple)
    b: tuple[Transfer, ...] = attrs.field(converter=tuple)
    c: tuple[Transfer, ...] = attrs.field(converter=tuple)
    fill: MemtileTask
    drain: MemtileTask


@attrs.frozen
class Slab:
    """A run of `units` units from unit `first`, B armed once for all of
    them. Resident: b_slots = k_iters, b_uses = units (a fill serves every
    unit); streamed: b_slots divides units*k_iters, b_uses = 1. Passes count
    walks of the used slots per column block. `rtp` holds the words every
    core reads: N, m_row_blocks, k_iters, epilogue, clamp_min and clamp_max
    (float32 bit patterns as int32). `a[r]` are row r's A transfers, one per
    column block (every column of the row consumes them)."""

    first: int
    units: int
    resident: bool
    b_slots: int
    b_uses: int
    fill_passes: int
    drain_passes: int
    rtp: tuple[int, ...] = attrs.field(default=(), converter=tuple)
    a: tuple[tuple[Transfer, ...], ...] = attrs.field(
        default=(), converter=lambda rows: tuple(map(tuple, rows))
    )
    columns: tuple[ColumnProgram, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class Traffic:
    """DDR bytes: A and B read, C written."""

    a_read: int
    b_read: int
    c_written: int

    @property
    def total(self) -> int:
        return self.a_read + self.b_read + self.c_written


@attrs.frozen
class Program:
    """The per-shape schedule of one configuration, slab after slab."""

    configuration: str
    M: int
    K: int
    N: int
    pool: Pool
    b_element_bytes: int
    k_iters: int
    units: int
    slabs: tuple[Slab, ...] = attrs.field(converter=tuple)

    def traffic(self) -> Traffic:
        """The bytes the program's shim transfers move, by their patterns."""

        def total(transfers) -> int:
            return sum(t.elements for t in transfers)

        a = sum(total(row) for s in self.slabs for row in s.a)
        b = sum(total(col.b) for s in self.slabs for col in s.columns)
        c = sum(total(col.c) for s in self.slabs for col in s.columns)
        return Traffic(a * 2, b * self.b_element_bytes, c * 2)


def plan_slabs(
    units: int, k_iters: int, pool_slots: int, device: Device, resident: bool = True
) -> tuple[Slab, ...] | None:
    """M's units cut into the fewest equal slabs (spread by divmod) whose
    fill and drain passes per column block fit task_queue_depth pushes of
    max_repeat_count passes and, when the k-blocks fit the pool, that are
    all resident. None when even a one-unit slab does not fit. With
    `resident=False` every slab is streamed: B read once per unit, the
    schedule a per-row-block fifo gives."""
    if pool_slots < 1:
        return None
    most_passes = device.task_queue_depth * device.max_repeat_count
    keep_resident = resident and k_iters <= pool_slots

    def make(first: int, n: int) -> Slab:
        if keep_resident and n <= device.max_lock_value:
            return Slab(first, n, True, b_slots=k_iters, b_uses=n, fill_passes=1, drain_passes=n)
        b_slots = max(s for s in range(1, pool_slots + 1) if n * k_iters % s == 0)
        passes = n * k_iters // b_slots
        return Slab(first, n, False, b_slots, 1, passes, passes)

    def fits(slab: Slab) -> bool:
        return max(slab.fill_passes, slab.drain_passes) <= most_passes

    if not fits(make(0, 1)):
        return None
    # no slab may exceed `cap` units (a lock's count when resident, the passes
    # a column block can queue when streamed), so fewer than units / cap slabs
    # never fit: start there, or a large M would try every count below it
    cap = device.max_lock_value if keep_resident else most_passes * pool_slots // k_iters
    for n_slabs in range(max(1, -(-units // max(1, cap))), units + 1):
        size, extra = divmod(units, n_slabs)
        sizes = [size + (i < extra) for i in range(n_slabs)]
        slabs = [make(f, n) for f, n in zip(itertools.accumulate(sizes, initial=0), sizes)]
        if all(map(fits, slabs)) and (not keep_resident or all(s.resident for s in slabs)):
            return tuple(slabs)
    return None


def _pushes(work_blocks: int, passes: int, device: Device) -> list[Push]:
    """A push covers as many whole column blocks as one carries and is issued
    at the first; a block needing more passes than one push gets several."""
    most = device.max_repeat_count
    per_push = max(1, most // passes)
    pushes = []
    for block in range(0, work_blocks, per_push):
        count = min(per_push, work_blocks - block) * passes
        while count:
            pushes.append(Push(block, min(count, most)))
            count -= pushes[-1].repeat_count
    return pushes


def _b_task(name: str, wait: str, post: str, value: int, slots: int, pool: Pool, pushes):
    """A B task over the first `slots` slots: each BD acquires its slot's
    `wait` lock and releases its `post` lock by `value`."""
    size = pool.slot_elems
    bds = [
        SlotBd(i, i * size, size, LockOp(wait, i, value), LockOp(post, i, value))
        for i in range(slots)
    ]
    return MemtileTask(name, bds, pushes)


def _float_bits(value: float) -> int:
    return int(np.float32(value).view(np.int32))


def build_program(op, resident: bool = True) -> Program:
    """The program of `op`, a resolved FLMGemm (see the module docstring)."""
    device, K, N, tile_n = op.device, op.K, op.N, op.tile_n
    rows, cols = device.compute_rows, device.columns
    pool = memtile_pool(device, tile_n, op.b_format)
    bfp16 = op.b_format is BFormat.BFP16
    k_iters = K // K_TILE
    units = op.M // (M_TILE * rows * M_CHUNK)
    plan = plan_slabs(units, k_iters, pool.slots, device, resident)
    if plan is None:
        raise ValueError(f"{op.configuration()}: no slab cut of M={op.M}, K={K} fits the device")
    n_tiles = N // tile_n
    n_blocks = -(-n_tiles // cols)
    per_value = GROUP if bfp16 else 1
    lo, hi = op.clamp if op.clamp is not None else (-np.inf, np.inf)
    unit_rows = M_CHUNK * rows * M_TILE

    slabs = []
    for slab in plan:
        a = [
            [
                Transfer(
                    f"A row {r} block {j}",
                    offset=slab.first * unit_rows * K + r * M_TILE * K,
                    sizes=(slab.units, k_iters, M_CHUNK, M_TILE, K_TILE),
                    strides=(unit_rows * K, K_TILE, rows * M_TILE * K, K, 1),
                )
                for j in range(n_blocks)
            ]
            for r in range(rows)
        ]
        columns = []
        for c in range(cols):
            blocks = tuple(range(c, n_tiles, cols))
            b = [
                Transfer(
                    f"B column block {cb}",
                    offset=cb * tile_n * K // per_value,
                    sizes=(1 if slab.resident else slab.units, k_iters, 1, pool.slot_elems),
                    strides=(0, pool.slot_elems, 0, 1),
                )
                for cb in blocks
            ]
            out = [
                Transfer(
                    f"C column block {cb}",
                    offset=cb * tile_n + slab.first * unit_rows * N,
                    sizes=(1, slab.units * M_CHUNK, rows * M_TILE, tile_n),
                    strides=(0, rows * M_TILE * N, N, 1),
                )
                for cb in blocks
            ]

            fill_pushes = _pushes(len(blocks), slab.fill_passes, device)
            fill = _b_task("B fill", "prod", "cons", slab.b_uses, slab.b_slots, pool, fill_pushes)
            drain_pushes = _pushes(len(blocks), slab.drain_passes, device)
            drain = _b_task("B drain", "cons", "prod", 1, slab.b_slots, pool, drain_pushes)
            arm = [LockOp("prod", i, slab.b_uses) for i in range(slab.b_slots)] if blocks else []
            columns.append(ColumnProgram(c, blocks, arm, b, out, fill, drain))
        rtp = (N, slab.units * M_CHUNK, k_iters, op.epilogue.mode, _float_bits(lo), _float_bits(hi))
        slabs.append(attrs.evolve(slab, rtp=rtp, a=a, columns=columns))
    return Program(
        op.configuration(),
        op.M,
        K,
        N,
        pool,
        b_element_bytes=pool.slot_bytes // pool.slot_elems,
        k_iters=k_iters,
        units=units,
        slabs=slabs,
    )
