"""The per-shape schedule of `FLMGemm`: the memtile B pool and the slab cut.

B has no ObjectFifo: a fifo's memtile descriptors are device configuration
and would bake K and M into the image every shape shares. Instead every
column's memtile holds a pool of k-block slots, each with a producer and a
consumer lock, which each call arms:

- a *unit* is one row block of 64 x compute_rows rows of A and C;
- M is cut into *slabs* of units. A slab is *resident* when its k-blocks fit
  the pool and its units fit a lock's range: DDR reads each column block of
  B once and the memtile replays it to every unit. Otherwise it is
  *streamed*: the pool turns over like a fifo and B is read once per unit;
- the pool's two memtile tasks (the fill from the shim, the drain to the
  column's cores) are pushed in pieces of at most `max_repeat_count`
  passes, each at the first column block it covers.

`iron.ops.flm.design` turns this into the design's runtime sequence. Every
limit comes from the `Device`; the only constants here are the kernel's
geometry and B_MAX_SLOTS (how many memtile BDs the compiler leaves the
pool, its choice rather than the target model's).
"""

from __future__ import annotations

import itertools

import attrs

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
class Push:
    """One push of a memtile task onto its channel's queue, issued at the
    column's `block`-th column block: `repeat_count` passes over the BD chain
    (1..max_repeat_count)."""

    block: int
    repeat_count: int


@attrs.frozen
class Slab:
    """A run of `units` units from unit `first`, B armed once for all of
    them. Resident: b_slots = k_iters, b_uses = units (a fill serves every
    unit); streamed: b_slots divides units*k_iters, b_uses = 1. Passes count
    walks of the used slots per column block."""

    first: int
    units: int
    resident: bool
    b_slots: int
    b_uses: int
    fill_passes: int
    drain_passes: int


@attrs.frozen
class Program:
    """The per-shape schedule of one configuration: the pool and the slabs
    (`iron.ops.flm.design` turns it into the design's runtime sequence)."""

    configuration: str
    M: int
    K: int
    N: int
    pool: Pool
    k_iters: int
    units: int
    slabs: tuple[Slab, ...] = attrs.field(converter=tuple)

    def column_blocks(self, tile_n: int, columns: int) -> list[tuple[int, ...]]:
        """The column blocks each column works on (a trailing partial group
        leaves the last columns one block short)."""
        n_tiles = self.N // tile_n
        return [tuple(range(c, n_tiles, columns)) for c in range(columns)]


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
    # A's and B's shim transfers iterate over a slab's units (the BD's
    # iteration count: verifyStridesWraps, up to device.shim_max_iterations)
    most_units = device.shim_max_iterations
    keep_resident = resident and k_iters <= pool_slots

    def make(first: int, n: int) -> Slab:
        if keep_resident and n <= device.max_lock_value:
            return Slab(first, n, True, b_slots=k_iters, b_uses=n, fill_passes=1, drain_passes=n)
        b_slots = max(s for s in range(1, pool_slots + 1) if n * k_iters % s == 0)
        passes = n * k_iters // b_slots
        return Slab(first, n, False, b_slots, 1, passes, passes)

    def fits(slab: Slab) -> bool:
        return max(slab.fill_passes, slab.drain_passes) <= most_passes and slab.units <= most_units

    if not fits(make(0, 1)):
        return None
    # no slab may exceed `cap` units (a lock's count when resident, the passes
    # a column block can queue when streamed, the shim's iterations), so fewer
    # than units / cap slabs never fit: start there, or a large M would try
    # every count below it
    cap = device.max_lock_value if keep_resident else most_passes * pool_slots // k_iters
    cap = min(cap, most_units)
    for n_slabs in range(max(1, -(-units // max(1, cap))), units + 1):
        size, extra = divmod(units, n_slabs)
        sizes = [size + (i < extra) for i in range(n_slabs)]
        slabs = [make(f, n) for f, n in zip(itertools.accumulate(sizes, initial=0), sizes)]
        if all(map(fits, slabs)) and (not keep_resident or all(s.resident for s in slabs)):
            return tuple(slabs)
    return None


def pushes(work_blocks: int, passes: int, device: Device) -> list[Push]:
    """A push covers as many whole column blocks as one carries and is issued
    at the first; a block needing more passes than one push gets several."""
    most = device.max_repeat_count
    per_push = max(1, most // passes)
    out = []
    for block in range(0, work_blocks, per_push):
        count = min(per_push, work_blocks - block) * passes
        while count:
            out.append(Push(block, min(count, most)))
            count -= out[-1].repeat_count
    return out


def build_program(op, resident: bool = True) -> Program:
    """The program of `op`, a resolved FLMGemm (see the module docstring)."""
    device, K = op.device, op.K
    pool = memtile_pool(device, op.tile_n, op.b_format)
    k_iters = K // K_TILE
    units = op.M // (M_TILE * device.compute_rows * M_CHUNK)
    plan = plan_slabs(units, k_iters, pool.slots, device, resident)
    if plan is None:
        raise ValueError(f"{op.configuration()}: no slab cut of M={op.M}, K={K} fits the device")
    return Program(op.configuration(), op.M, K, op.N, pool, k_iters, units, plan)
