"""MLIR for programmed memtile pools (`forward(..., programmed=True)`),
printed from the lowered form (`iron.design.lower`).

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

The channels are the lowered ones (the top of each tile's range: the
ObjectFifo lowering takes the lowest free channel for the fifos it lowers
and never sees the runtime's memtile tasks). Each pushed BD carries its
``bd_id``, also the lowered one: the top of its channel's bank, since the
runtime sequence's BD allocator (`AIEAssignRuntimeSequenceBDIDs`) would
otherwise number memtile BDs from 0 for channel 0, over the static chains'
ids (`aie-assign-bd-ids` numbers them from the bottom of each bank) and
out of an odd channel's reach (`isBdChannelAccessible`). Lock values are
SSA ``arith.constant``s, as the dialect's ``aie.use_lock`` takes them.
"""

from __future__ import annotations

from iron.design.lower import Lowered, Push
from iron.design.mlir import memref, tile_value
from iron.design.model import DesignError, Link


class Pools:
    """The programmed links of a lowered design and every name their
    emission uses."""

    def __init__(self, lowered: Lowered) -> None:
        self.lowered = lowered
        self.design = design = lowered.design
        config = lowered.configuration
        self.links = [link for link in design.links if link.programmed]
        self.sources = {link.sources[0]: link for link in self.links}
        self.destinations = {link.destinations[0]: link for link in self.links}
        self.pool = {p.link: p for p in config.pools if p.kind == "programmed"}
        self.channel = {(c.fifo, c.end, c.direction): c.index for c in config.channels}
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

    def skips(self, fifo: str) -> bool:
        """Whether `fifo` is a pool's leg, emitted here rather than as an
        ``aie.objectfifo``."""
        return fifo in self.sources or fifo in self.destinations

    def symbols(self) -> list[tuple[str, str]]:
        """(owner, symbol) of every symbol the pools define."""
        out = []
        for link in self.links:
            for i in range(self.pool[link.name].depth):
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

    def lock_values(self) -> dict[int, str]:
        """Each slot's producer lock (into `Configuration.locks`) by SSA name:
        what `SetLock` sets."""
        return {
            producer: self._lock(link, "prod", i)
            for link in self.links
            for i, (producer, _) in enumerate(self.pool[link.name].slot_locks)
        }

    # ---- names

    @staticmethod
    def _slot(link: Link, slot: int) -> str:
        return f"%{link.name}.slot{slot}"

    @staticmethod
    def _lock(link: Link, kind: str, slot: int) -> str:
        return f"%{link.name}.{kind}{slot}"

    @staticmethod
    def end_buffer(fifo: str, worker: str, index: int) -> str:
        return f"%{fifo}.{worker}.buff{index}"

    @staticmethod
    def end_lock(fifo: str, worker: str, kind: str) -> str:
        return f"%{fifo}.{worker}.{kind}"

    @staticmethod
    def next_value(fifo: str, worker: str) -> str:
        return f"%{fifo}.{worker}.next"

    # ---- the device ------------------------------------------------------------

    def device_lines(self) -> list[str]:
        lines = []
        for link in self.links:
            lines += self._memtile(link) + self._routes(link)
            destination = self.design.fifo(link.destinations[0])
            for consumer in destination.consumers:
                lines += self._consumer_end(destination, consumer)
        return lines

    def _memtile(self, link: Link) -> list[str]:
        pool = self.pool[link.name]
        type_ = memref(self.design, pool.shape, pool.dtype, f"fifo {pool.name}")
        tile = tile_value(link.tile)
        lines = []
        for i in range(pool.depth):
            lines += [
                f'{self._slot(link, i)} = aie.buffer({tile}) {{sym_name = "{link.name}_slot{i}"}} : {type_}',
                f'{self._lock(link, "prod", i)} = aie.lock({tile}) {{init = 0 : i32, sym_name = "{link.name}_prod{i}"}}',
                f'{self._lock(link, "cons", i)} = aie.lock({tile}) {{init = 0 : i32, sym_name = "{link.name}_cons{i}"}}',
            ]
        return lines

    def _routes(self, link: Link) -> list[str]:
        design, channel = self.design, self.channel
        source, destination = design.fifo(link.sources[0]), design.fifo(link.destinations[0])
        shim, mem = tile_value(source.producer.tile), tile_value(link.tile)
        memtile = f"memtile {link.name}"
        shim_channel = channel[source.name, "runtime", "MM2S"]
        lines = [
            f"aie.flow({shim}, DMA : {shim_channel}, {mem}, DMA : {channel[source.name, memtile, 'S2MM']})",
            f"aie.shim_dma_allocation @{source.name}({shim}, MM2S, {shim_channel})",
        ]
        for consumer in destination.consumers:
            core = tile_value(design.worker(consumer.name).tile)
            lines.append(
                f"aie.flow({mem}, DMA : {channel[destination.name, memtile, 'MM2S']}, {core}, "
                f"DMA : {channel[destination.name, consumer.label, 'S2MM']})"
            )
        return lines

    def _consumer_end(self, fifo, consumer) -> list[str]:
        """What the ObjectFifo lowering builds for a consumer end on a core:
        a ring of buffers under a lock pair, filled by an S2MM chain."""
        worker = consumer.name
        core_of = self.lowered.configuration.core(worker)
        pool = self.lowered.configuration.pools[core_of.end(fifo.name).pool]
        depth = pool.depth
        core = tile_value(core_of.tile)
        type_ = memref(self.design, fifo.shape, fifo.dtype, f"fifo {fifo.name}")
        base = f"{fifo.name}_{worker}"
        prod, cons = (
            self.end_lock(fifo.name, worker, "prod"),
            self.end_lock(fifo.name, worker, "cons"),
        )
        lines = [
            f'{self.end_buffer(fifo.name, worker, i)} = aie.buffer({core}) {{sym_name = "{base}_buff_{i}"}} : {type_}'
            for i in range(depth)
        ]
        lines += [
            f'{prod} = aie.lock({core}) {{init = {depth} : i32, sym_name = "{base}_prod"}}',
            f'{cons} = aie.lock({core}) {{init = 0 : i32, sym_name = "{base}_cons"}}',
            f'{self.next_value(fifo.name, worker)} = aie.buffer({core}) {{sym_name = "{base}_next"}} : memref<1xi32>',
            f"%mem.{base} = aie.mem({core}) {{",
            "  %one = arith.constant 1 : i32",
            f"  %0 = aie.dma_start(S2MM, {self.channel[fifo.name, consumer.label, 'S2MM']}, ^bd0, ^end)",
        ]
        for i in range(depth):
            lines += [
                f"^bd{i}:",
                f"  aie.use_lock({prod}, AcquireGreaterEqual, %one)",
                f"  aie.dma_bd({self.end_buffer(fifo.name, worker, i)} : {type_} offset = 0 len = {fifo.size})",
                f"  aie.use_lock({cons}, Release, %one)",
                f"  aie.next_bd ^bd{(i + 1) % depth}",
            ]
        return [*lines, "^end:", "  aie.end", "}"]

    # ---- the runtime sequence ----------------------------------------------------

    def push(self, push: Push, task: str) -> list[str]:
        statement = push.statement
        link = self.design.link(statement.link)
        pool = self.pool[link.name]
        type_ = memref(self.design, pool.shape, pool.dtype, f"fifo {pool.name}")
        channel = self.lowered.configuration.channels[push.channel]
        take, give = ("prod", "cons") if statement.fill else ("cons", "prod")
        values = sorted({v for bd in statement.bds for v in (bd.acquire, bd.release)})
        body = [f"%c{v}_i32 = arith.constant {v} : i32" for v in values]
        for index, (bd, bd_id) in enumerate(zip(statement.bds, push.bd_ids)):
            if index:
                body.append(f"^bd{index}:")
            body += [
                f"aie.use_lock({self._lock(link, take, bd.slot)}, AcquireGreaterEqual, %c{bd.acquire}_i32)",
                f"aie.dma_bd({self._slot(link, bd.slot)} : {type_} offset = 0 len = {pool.size}) "
                f"{{bd_id = {bd_id} : i32}}",
                f"aie.use_lock({self._lock(link, give, bd.slot)}, Release, %c{bd.release}_i32)",
                f"aie.next_bd ^bd{index + 1}" if index + 1 < len(statement.bds) else "aie.end",
            ]
        repeat = (
            f" {{repeat_count = {statement.repeat_count - 1} : i32}}"
            if statement.repeat_count > 1
            else ""
        )
        return [
            f"{task} = aiex.dma_configure_task({tile_value(link.tile)}, {channel.direction}, "
            f"{channel.index}) {{",
            *(("  " if not line.startswith("^") else "") + line for line in body),
            f"}}{repeat}",
            f"aiex.dma_start_task({task})",
        ]
