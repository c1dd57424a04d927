"""The schedule model: executes an `FLMGemm` program as data, since the
hardware that would run it cannot run in a test.

The device side comes from the operator's configuration (tile_n, ct_k, B's
format, the compiled epilogues, the pool the memtile has room for); every
per-shape fact comes from the program. Per slab:

- the shim transfers read A and B out of DDR and write C into it, through
  their own offsets, sizes and strides, and nothing else touches DDR;
- each column's memtile pool runs its two B tasks under producer and
  consumer lock counters (the locks persist from slab to slab, as they do
  from dispatch to dispatch): the fill takes k-blocks from the B stream into
  slots, the drain broadcasts slots to the column's cores;
- the cores read their trip counts, epilogue and clamp from the RTP words,
  take A objects from their row's broadcast and B k-blocks from their
  column's broadcast in order, accumulate in float32 and push C objects,
  which the C transfers scatter into DDR.

A program that would hang, overflow a device limit or move data out of
bounds raises `ScheduleError` naming the slab, the column or row, and the
transfer.
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np
from numpy.lib.stride_tricks import as_strided

from iron.core import Device, bf16
from iron.ops.flm.gemm import Epilogue, FLMGemm, finish, k_block_product
from iron.ops.flm.packing import GROUP, GROUP_BYTES, BFormat, read_slot
from iron.ops.flm.schedule import (
    K_TILE,
    M_CHUNK,
    M_TILE,
    ColumnProgram,
    MemtileTask,
    Program,
    Traffic,
    Transfer,
    memtile_pool,
)


class ScheduleError(ValueError):
    """The program would hang the device, break one of its limits or move
    data outside a buffer."""


def _window(ddr: np.ndarray, transfer: Transfer, where: str) -> np.ndarray:
    """The elements `transfer` addresses, as a strided view of `ddr` (whose
    first axis is the element index), outermost dimension first."""
    sizes, strides, offset = transfer.sizes, transfer.strides, transfer.offset
    if len(sizes) != len(strides) or min(sizes) < 1 or min(strides) < 0:
        raise ScheduleError(
            f"{where}, {transfer.name}: sizes {sizes} and strides {strides} are no access "
            "pattern (one stride per size, sizes >= 1, strides >= 0)"
        )
    last = offset + sum((n - 1) * s for n, s in zip(sizes, strides))
    if offset < 0 or last >= len(ddr):
        raise ScheduleError(
            f"{where}, {transfer.name}: addresses elements {offset}..{last} "
            f"of a {len(ddr)}-element buffer"
        )
    step = ddr.strides[0]
    return as_strided(
        ddr[offset:],
        shape=sizes + ddr.shape[1:],
        strides=tuple(s * step for s in strides) + ddr.strides[1:],
    )


class _Fifo:
    """A stream of elements (rows of an array) from a producer to a consumer."""

    def __init__(self) -> None:
        self.parts: deque[np.ndarray] = deque()
        self.size = 0

    def put(self, data: np.ndarray) -> None:
        self.parts.append(data)
        self.size += len(data)

    def take(self, n: int) -> np.ndarray:
        out = []
        while n:
            head = self.parts[0]
            if len(head) <= n:
                out.append(self.parts.popleft())
            else:
                out.append(head[:n])
                self.parts[0] = head[n:]
            n -= len(out[-1])
            self.size -= len(out[-1])
        return out[0] if len(out) == 1 else np.concatenate(out)


class _Source:
    """Elements a list of transfers reads from DDR, in order, each read
    whole when the stream reaches it."""

    def __init__(self, ddr: np.ndarray, transfers, where: str, count) -> None:
        self.ddr, self.pending, self.where, self.count = ddr, deque(transfers), where, count
        self.fifo = _Fifo()

    @property
    def remaining(self) -> int:
        return self.fifo.size + sum(t.elements for t in self.pending)

    def take(self, n: int, what: str) -> np.ndarray:
        if n > self.remaining:
            raise ScheduleError(
                f"{self.where}: {what} needs {n} elements; its transfers have {self.remaining} left"
            )
        while self.fifo.size < n:
            transfer = self.pending.popleft()
            window = _window(self.ddr, transfer, self.where)
            self.fifo.put(np.array(window).reshape(-1, *self.ddr.shape[1:]))
            self.count(transfer.elements)
        return self.fifo.take(n)

    def finish(self) -> None:
        if self.remaining:
            names = ", ".join(t.name for t in self.pending) or "its last transfer"
            raise ScheduleError(
                f"{self.where}: {self.remaining} elements ({names}) that nothing consumes"
            )


class _Sink:
    """Elements the cores produce, scattered into DDR by a list of
    transfers in order, each written once the stream holds all of it."""

    def __init__(self, ddr: np.ndarray, transfers, where: str, count) -> None:
        self.ddr, self.pending, self.where, self.count = ddr, deque(transfers), where, count
        self.fifo = _Fifo()

    def put(self, data: np.ndarray) -> None:
        self.fifo.put(data)
        while self.pending and self.pending[0].elements <= self.fifo.size:
            transfer = self.pending.popleft()
            window = _window(self.ddr, transfer, self.where)
            window[...] = self.fifo.take(transfer.elements).reshape(window.shape)
            self.count(transfer.elements)

    def finish(self) -> None:
        if self.pending:
            raise ScheduleError(
                f"{self.where}, {self.pending[0].name}: waits for "
                f"{self.pending[0].elements - self.fifo.size} elements the cores never produce"
            )
        if self.fifo.size:
            raise ScheduleError(f"{self.where}: {self.fifo.size} C elements no transfer drains")


class _TaskRun:
    """A memtile task in flight: its BD executions, pass by pass."""

    def __init__(self, task: MemtileTask) -> None:
        self.task = task
        self.steps = deque(
            (push, run, bd)
            for push, p in enumerate(task.pushes)
            for run in range(p.repeat_count)
            for bd in task.bds
        )

    def describe(self, locks) -> str:
        if not self.steps:
            return f"{self.task.name} has finished"
        push, run, bd = self.steps[0]
        wait = bd.acquire
        return (
            f"{self.task.name} BD for slot {bd.slot} (push {push}, pass {run}) waits for "
            f"{wait.lock}[{wait.slot}] >= {wait.value}, which holds {locks[wait.lock][wait.slot]}"
        )


class _Column:
    """One column's memtile B pool. Locks and contents persist across slabs."""

    def __init__(self, slots: int, slot_elems: int, inner, dtype, device: Device):
        self.device = device
        self.buffer = np.zeros((slots * slot_elems, *inner), dtype)
        self.locks = {"prod": [0] * slots, "cons": [0] * slots}

    def start(self, where: str, program: ColumnProgram, source: _Source) -> None:
        self.where, self.source = where, source
        most = self.device.max_lock_value
        for op in program.arm:
            self._check_lock(op, "B arm")
            if op.value > most:
                raise ScheduleError(
                    f"{where}, B arm: sets {op.lock}[{op.slot}] to {op.value}, "
                    f"above the device's max lock value {most}"
                )
            self.locks[op.lock][op.slot] = op.value
        for task in (program.fill, program.drain):
            self._check_task(task)
        self.fill, self.drain = _TaskRun(program.fill), _TaskRun(program.drain)
        self.broadcast = _Fifo()

    def _check_lock(self, op, name: str) -> None:
        if op.lock not in self.locks or not 0 <= op.slot < len(self.locks["prod"]):
            raise ScheduleError(
                f"{self.where}, {name}: no lock {op.lock}[{op.slot}] in a pool of "
                f"{len(self.locks['prod'])} slots"
            )

    def _check_task(self, task: MemtileTask) -> None:
        where, device = f"{self.where}, {task.name}", self.device
        for i, push in enumerate(task.pushes):
            if not 1 <= push.repeat_count <= device.max_repeat_count:
                raise ScheduleError(
                    f"{where}: push {i} repeats {push.repeat_count} passes; "
                    f"the device's repeat count is 1..{device.max_repeat_count}"
                )
        for block, pushes in Counter(p.block for p in task.pushes).items():
            if pushes > device.task_queue_depth:
                raise ScheduleError(
                    f"{where}: {pushes} pushes at column block {block} overrun the "
                    f"{device.task_queue_depth}-deep task queue before the block can drain any"
                )
        for bd in task.bds:
            self._check_lock(bd.acquire, task.name)
            self._check_lock(bd.release, task.name)
            if bd.offset < 0 or bd.offset + bd.size > len(self.buffer):
                raise ScheduleError(
                    f"{where}: BD for slot {bd.slot} moves {bd.offset}..{bd.offset + bd.size} "
                    f"of a {len(self.buffer)}-element pool"
                )
            if bd.acquire.value > device.max_lock_value:
                raise ScheduleError(
                    f"{where}: BD for slot {bd.slot} acquires {bd.acquire.lock}[{bd.slot}] >= "
                    f"{bd.acquire.value}, above the max lock value "
                    f"{device.max_lock_value}: never satisfiable"
                )

    def _step(self, run: _TaskRun, fill: bool) -> bool:
        """Execute the task's next BD if its lock (and, filling, its data) is there."""
        if not run.steps:
            return False
        _, _, bd = run.steps[0]
        wait, post = bd.acquire, bd.release
        if self.locks[wait.lock][wait.slot] < wait.value:
            return False
        if fill and self.source.remaining < bd.size:
            return False
        run.steps.popleft()
        self.locks[wait.lock][wait.slot] -= wait.value
        window = slice(bd.offset, bd.offset + bd.size)
        if fill:
            self.buffer[window] = self.source.take(bd.size, f"{run.task.name} BD {bd.slot}")
        else:
            self.broadcast.put(self.buffer[window].copy())
        self.locks[post.lock][post.slot] += post.value
        if self.locks[post.lock][post.slot] > self.device.max_lock_value:
            raise ScheduleError(
                f"{self.where}, {run.task.name}: BD for slot {bd.slot} raises "
                f"{post.lock}[{post.slot}] to {self.locks[post.lock][post.slot]}, above the "
                f"device's max lock value {self.device.max_lock_value}"
            )
        return True

    def _advance(self) -> bool:
        moved = False
        while self._step(self.fill, True) | self._step(self.drain, False):
            moved = True
        return moved

    def _stuck(self, why: str) -> ScheduleError:
        starved = ""
        if self.fill.steps and self.source.remaining < self.fill.steps[0][2].size:
            starved = "; the fill waits for B data its transfers never send"
        return ScheduleError(
            f"{self.where}: {why}: {self.fill.describe(self.locks)}; "
            f"{self.drain.describe(self.locks)}{starved}"
        )

    def take(self, n: int) -> np.ndarray:
        """The next `n` broadcast elements, running the tasks until they exist."""
        while self.broadcast.size < n:
            if not self._advance():
                raise self._stuck("the cores wait for B that is never broadcast")
        return self.broadcast.take(n)

    def finish(self) -> None:
        self._advance()
        if self.fill.steps or self.drain.steps:
            raise self._stuck("the slab ends with B tasks that can never finish")
        if self.broadcast.size:
            raise ScheduleError(
                f"{self.where}: {self.broadcast.size} broadcast B elements the cores never read"
            )


def run(
    op: FLMGemm, A, B, device: Device | None = None, program: Program | None = None
) -> tuple[np.ndarray, Traffic]:
    """Execute `program` (by default `op.program(device)`) on A (M, K) bf16
    and packed B; return C (M, N) bf16, assembled only from what the C
    transfers wrote (elements none wrote stay NaN), and the DDR traffic the
    transfers moved."""
    op = op.on(device)
    program = program if program is not None else op.program()
    device = op.device
    a_ddr = np.ascontiguousarray(A, dtype=bf16).reshape(-1)
    bfp16 = op.b_format is BFormat.BFP16
    b_ddr = np.ascontiguousarray(B).reshape((-1, GROUP_BYTES) if bfp16 else (-1,))
    c_ddr = np.full(op.M * op.N, np.nan, dtype=bf16)
    moved = {"A": 0, "B": 0, "C": 0}

    def counter(leg):
        def count(elements):
            moved[leg] += elements

        return count

    pool = memtile_pool(device, op.tile_n, op.b_format)
    columns = [
        _Column(pool.slots, pool.slot_elems, b_ddr.shape[1:], b_ddr.dtype, device)
        for _ in range(device.columns)
    ]
    rows, tile_n = device.compute_rows, op.tile_n
    k_chunk = K_TILE * tile_n // (GROUP if bfp16 else 1)  # elements of one k-block
    for s, slab in enumerate(program.slabs):
        if len(slab.a) != rows or len(slab.columns) != device.columns:
            raise ScheduleError(
                f"slab {s}: programs {len(slab.a)} rows and {len(slab.columns)} columns; "
                f"the array has {rows} x {device.columns}"
            )
        n, row_blocks, k_iters, mode, lo_bits, hi_bits = slab.rtp
        units = row_blocks // M_CHUNK
        compiled = [e.mode for e in op.epilogue_modes]
        if mode not in compiled:
            raise ScheduleError(f"slab {s}: RTP epilogue {mode} is not compiled in ({compiled})")
        epilogue = list(Epilogue)[mode]
        lo, hi = np.array([lo_bits, hi_bits], np.int32).view(np.float32)
        a_rows = [
            _Source(a_ddr, slab.a[r], f"slab {s}, row {r}", counter("A")) for r in range(rows)
        ]
        sinks = []
        for c, column in enumerate(columns):
            where = f"slab {s}, column {c}"
            column.start(
                where, slab.columns[c], _Source(b_ddr, slab.columns[c].b, where, counter("B"))
            )
            sinks.append(_Sink(c_ddr, slab.columns[c].c, where, counter("C")))

        # the cores' nest, from the RTP words: each core works on its first
        # n_work column blocks (derived from N and its column) and only drains
        # its row's A broadcast through the rest of the n_blocks
        n_tiles = n // tile_n
        n_blocks = -(-n_tiles // device.columns)
        n_work = [
            (n_tiles - c + device.columns - 1) // device.columns for c in range(device.columns)
        ]
        for j in range(n_blocks):
            objects = units * k_iters * M_TILE * K_TILE
            a = np.stack([src.take(objects, f"the cores' A, block {j}") for src in a_rows])
            a = a.reshape(rows, units, k_iters, M_TILE, K_TILE).transpose(1, 2, 0, 3, 4)
            a = a.reshape(units, k_iters, rows * M_TILE, K_TILE)  # C's row order per unit
            working = [c for c in range(device.columns) if n_work[c] > j]
            chunks = {
                c: columns[c].take(units * k_iters * k_chunk).reshape(units, k_iters, k_chunk, -1)
                for c in working
            }  # one k-block per (unit, k), in the order the cores consume them
            acc = {c: np.zeros((units * rows * M_TILE, tile_n), np.float32) for c in working}
            for k in range(k_iters):
                _accumulate(
                    op, a[:, k].reshape(-1, K_TILE), {c: chunks[c][:, k] for c in working}, acc
                )
            for c in working:
                out = finish(acc[c], epilogue, lo, hi, op.rounding)
                sinks[c].put(out.reshape(-1))
        for source in a_rows:
            source.finish()
        for column, sink in zip(columns, sinks):
            column.finish()
            column.source.finish()
            sink.finish()
    traffic = Traffic(moved["A"] * 2, moved["B"] * b_ddr.strides[0], moved["C"] * 2)
    return c_ddr.reshape(op.M, op.N), traffic


def _accumulate(op: FLMGemm, a_k: np.ndarray, chunks: dict, acc: dict) -> None:
    """acc[c] += one k-block's product for every working column. The cores
    multiply each unit's A rows by the k-block their column broadcast for
    that unit; where every unit got the same bytes (the normal case), the
    columns share one wide product."""

    def decode(chunk):
        return read_slot(chunk, op.tile_n, op.ct_k, op.b_format)

    if not chunks:
        return
    units = len(next(iter(chunks.values())))
    rows_per_unit = len(a_k) // units
    shared = [c for c, ch in chunks.items() if all(np.array_equal(u, ch[0]) for u in ch[1:])]
    if shared:
        product = k_block_product(a_k, np.hstack([decode(chunks[c][0]) for c in shared]))
        for i, c in enumerate(shared):
            acc[c] += product[:, i * op.tile_n : (i + 1) * op.tile_n]
    for c in chunks.keys() - set(shared):
        for u in range(units):
            rows = slice(u * rows_per_unit, (u + 1) * rows_per_unit)
            acc[c][rows] += k_block_product(a_k[rows], decode(chunks[c][u]))
