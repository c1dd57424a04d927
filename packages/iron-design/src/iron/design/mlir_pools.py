"""MLIR for programmed memtile pools (`forward(..., programmed=True)`).

A programmed pool has no BD chain of its own, so it cannot be an
``aie.objectfifo.link``: the ObjectFifo lowering would give the memtile a
chain that runs from the moment the device is configured. What `to_mlir`
emits instead, for link L from fifo S (the runtime's fill) to fifo D (the
cores' stream), in mlir-aie's dialect at the pin:

- per slot i, ``aie.buffer`` ``L_slot<i>`` on the memtile and a lock pair
  ``L_prod<i>`` / ``L_cons<i>``, both ``init = 0`` (the runtime arms them);
- S's route: ``aie.flow`` from its shim's MM2S to the memtile's S2MM, and
  ``aie.shim_dma_allocation @S`` so that fills of S stay
  ``aiex.dma_configure_task_for @S``;
- D's route: one ``aie.flow`` from the memtile's MM2S to each consumer
  core's S2MM (a broadcast), and on each core what the ObjectFifo lowering
  would build for a consumer end: ``depth`` buffers, a producer lock
  (``init = depth``) and a consumer lock, an ``aie.mem`` S2MM chain over the
  buffers, and in the core program ``aie.use_lock`` for acquires and
  releases, the ring's next object kept in a one-word ``aie.buffer``;
- in the runtime sequence, ``SetLock`` as ``aiex.set_lock`` on the slot's
  producer lock, and each ``PoolTask`` as ``aiex.dma_configure_task`` on the
  memtile channel (S2MM to fill, MM2S to drain), one ``aie.dma_bd`` per slot
  BD between ``aie.use_lock`` AcquireGreaterEqual / Release of its values,
  chained by ``aie.next_bd``, walked ``repeat_count`` times (the attribute
  is repeats - 1, as for shim tasks), started at once and freed when its
  group finishes (never awaited: what it moves is awaited downstream).

Channels the runtime drives are invisible to the ObjectFifo lowering, which
takes the lowest free channel of each tile for the fifos it lowers; so a
pool's channels are the highest of each tile (the last, then the one
before for a second pool), and `check` has counted every channel against
the tile's budget. Lock values are SSA ``arith.constant``s, as the dialect's
``aie.use_lock`` takes them.
"""

from __future__ import annotations

from iron.design.mlir import (
    _endpoint_tile,
    _memref,
    _tile_value,
    end_buffer,
    end_lock,
    end_next,
    lock_value,
    slot_value,
)
from iron.design.model import Design, DesignError, Link, PoolTask, SetLock


class Pools:
    """The programmed links of a placed design and every name their
    emission uses."""

    def __init__(self, design: Design) -> None:
        self.design = design
        self.links = [link for link in design.links if link.programmed]
        self.sources = {link.sources[0]: link for link in self.links}
        self.destinations = {link.destinations[0]: link for link in self.links}
        self.channels: dict[tuple, int] = {}
        taken: dict[tuple, int] = {}

        def channel(tile, direction: str, budget: int) -> int:
            used = taken.get((tile, direction), 0)
            taken[(tile, direction)] = used + 1
            return budget - 1 - used

        device = design.device
        for link in self.links:
            where = f"design {design.name}: link {link.name}"
            source, destination = design.fifo(link.sources[0]), design.fifo(link.destinations[0])
            if source.producer.kind != "shim":
                raise DesignError(f"{where}: a programmed pool is filled by the runtime (shim())")
            bad = [c.label for c in destination.consumers if c.kind != "core" or c.dims_from_stream]
            if bad:
                raise DesignError(
                    f"{where}: a programmed pool streams to cores, whole objects; not to "
                    f"{', '.join(bad)}"
                )
            self.channels[link.name, "in"] = channel(link.tile, "S2MM", device.memtile_dma_channels)
            self.channels[link.name, "out"] = channel(
                link.tile, "MM2S", device.memtile_dma_channels
            )
            self.channels[link.name, "shim"] = channel(
                source.producer.tile, "MM2S", device.shim_dma_channels
            )
            for consumer in destination.consumers:
                tile = design.worker(consumer.name).tile
                self.channels[link.name, "core", consumer.name] = channel(
                    tile, "S2MM", device.core_dma_channels
                )

    def __bool__(self) -> bool:
        return bool(self.links)

    def skips(self, fifo: str) -> bool:
        """Whether `fifo` is a pool's leg, emitted here rather than as an
        ``aie.objectfifo``."""
        return fifo in self.sources or fifo in self.destinations

    def slots(self, link: Link) -> int:
        source = self.design.fifo(link.sources[0])
        return source.depth_at(source.consumer("memtile", link.name))

    def symbols(self) -> list[tuple[str, str]]:
        """(owner, symbol) of every symbol the pools define."""
        out = []
        for link in self.links:
            for i in range(self.slots(link)):
                out += [
                    (f"link {link.name} slot {i}", f"{link.name}_{kind}{i}")
                    for kind in ("slot", "prod", "cons")
                ]
            out.append((f"fifo {link.sources[0]}'s shim allocation", link.sources[0]))
            destination = self.design.fifo(link.destinations[0])
            for consumer in destination.consumers:
                out += [
                    (
                        f"fifo {destination.name} at worker {consumer.name}",
                        f"{destination.name}_{consumer.name}_{kind}",
                    )
                    for kind in ("prod", "cons", "next")
                ]
        return out

    # ---- the device ------------------------------------------------------------

    def device_lines(self) -> list[str]:
        lines = []
        for link in self.links:
            lines += self._memtile(link) + self._routes(link)
            destination = self.design.fifo(link.destinations[0])
            for consumer in destination.consumers:
                lines += self._consumer_end(link, destination, consumer.name)
        return lines

    def _memtile(self, link: Link) -> list[str]:
        source = self.design.fifo(link.sources[0])
        memref = _memref(self.design, source.shape, source.dtype, f"fifo {source.name}")
        tile = _tile_value(link.tile)
        lines = []
        for i in range(self.slots(link)):
            lines += [
                f'{slot_value(link, i)} = aie.buffer({tile}) {{sym_name = "{link.name}_slot{i}"}} : {memref}',
                f'{lock_value(link, "prod", i)} = aie.lock({tile}) {{init = 0 : i32, sym_name = "{link.name}_prod{i}"}}',
                f'{lock_value(link, "cons", i)} = aie.lock({tile}) {{init = 0 : i32, sym_name = "{link.name}_cons{i}"}}',
            ]
        return lines

    def _routes(self, link: Link) -> list[str]:
        source = self.design.fifo(link.sources[0])
        destination = self.design.fifo(link.destinations[0])
        shim, mem = _tile_value(source.producer.tile), _tile_value(link.tile)
        shim_channel = self.channels[link.name, "shim"]
        lines = [
            f"aie.flow({shim}, DMA : {shim_channel}, {mem}, DMA : {self.channels[link.name, 'in']})",
            f"aie.shim_dma_allocation @{source.name}({shim}, MM2S, {shim_channel})",
        ]
        for consumer in destination.consumers:
            core = _tile_value(_endpoint_tile(self.design, consumer))
            lines.append(
                f"aie.flow({mem}, DMA : {self.channels[link.name, 'out']}, {core}, DMA : "
                f"{self.channels[link.name, 'core', consumer.name]})"
            )
        return lines

    def _consumer_end(self, link: Link, fifo, worker: str) -> list[str]:
        """What the ObjectFifo lowering builds for a consumer end on a core:
        a ring of buffers under a lock pair, filled by an S2MM chain."""
        depth = fifo.depth_at(fifo.consumer("core", worker))
        tile = self.design.worker(worker).tile
        core = _tile_value(tile)
        memref = _memref(self.design, fifo.shape, fifo.dtype, f"fifo {fifo.name}")
        base = f"{fifo.name}_{worker}"
        prod, cons = end_lock(fifo.name, worker, "prod"), end_lock(fifo.name, worker, "cons")
        lines = [
            f'{end_buffer(fifo.name, worker, i)} = aie.buffer({core}) {{sym_name = "{base}_buff_{i}"}} : {memref}'
            for i in range(depth)
        ]
        lines += [
            f'{prod} = aie.lock({core}) {{init = {depth} : i32, sym_name = "{base}_prod"}}',
            f'{cons} = aie.lock({core}) {{init = 0 : i32, sym_name = "{base}_cons"}}',
            f'{end_next(fifo.name, worker)} = aie.buffer({core}) {{sym_name = "{base}_next"}} : memref<1xi32>',
            f"%mem.{base} = aie.mem({core}) {{",
            "  %one = arith.constant 1 : i32",
            f"  %0 = aie.dma_start(S2MM, {self.channels[link.name, 'core', worker]}, ^bd0, ^end)",
        ]
        for i in range(depth):
            lines += [
                f"^bd{i}:",
                f"  aie.use_lock({prod}, AcquireGreaterEqual, %one)",
                f"  aie.dma_bd({end_buffer(fifo.name, worker, i)} : {memref} offset = 0 len = {fifo.size})",
                f"  aie.use_lock({cons}, Release, %one)",
                f"  aie.next_bd ^bd{(i + 1) % depth}",
            ]
        return [*lines, "^end:", "  aie.end", "}"]

    # ---- the runtime sequence ----------------------------------------------------

    def statement(self, statement: PoolTask | SetLock, task: str) -> list[str]:
        link = self.design.link(statement.link)
        if isinstance(statement, SetLock):
            return [f"aiex.set_lock({lock_value(link, 'prod', statement.slot)}, {statement.value})"]
        source = self.design.fifo(link.sources[0])
        memref = _memref(self.design, source.shape, source.dtype, f"fifo {source.name}")
        direction, channel = ("S2MM", "in") if statement.fill else ("MM2S", "out")
        take, give = ("prod", "cons") if statement.fill else ("cons", "prod")
        values = sorted({v for bd in statement.bds for v in (bd.acquire, bd.release)})
        body = [f"%c{v}_i32 = arith.constant {v} : i32" for v in values]
        for index, bd in enumerate(statement.bds):
            if index:
                body.append(f"^bd{index}:")
            body += [
                f"aie.use_lock({lock_value(link, take, bd.slot)}, AcquireGreaterEqual, %c{bd.acquire}_i32)",
                f"aie.dma_bd({slot_value(link, bd.slot)} : {memref} offset = 0 len = {source.size})",
                f"aie.use_lock({lock_value(link, give, bd.slot)}, Release, %c{bd.release}_i32)",
                f"aie.next_bd ^bd{index + 1}" if index + 1 < len(statement.bds) else "aie.end",
            ]
        repeat = (
            f" {{repeat_count = {statement.repeat_count - 1} : i32}}"
            if statement.repeat_count > 1
            else ""
        )
        return [
            f"{task} = aiex.dma_configure_task({_tile_value(link.tile)}, {direction}, "
            f"{self.channels[link.name, channel]}) {{",
            *(("  " if not line.startswith("^") else "") + line for line in body),
            f"}}{repeat}",
            f"aiex.dma_start_task({task})",
        ]
