"""What a placed design takes of each tile: memory, DMA channels, locks and
buffer descriptors, as mlir-aie's ObjectFifo lowering
(AIEObjectFifoStatefulTransform, mlir-aie main of August 2026) would
allocate them. `check` measures these against `device.limits(kind)`;
`iron design show` prints them.

The rules, from the lowering:

- A fifo from one core to one adjacent core (the producer core can reach
  the consumer's memory or the other way round: own tile, west, north or
  south neighbour, `isLegalMemAffinity`) with no `dims_to_stream`,
  `dims_from_stream` or `repeat_count` is lowered without DMA: one pool of
  the producer's depth, in the producer's memory unless only the producer
  can reach the consumer's. Every other fifo uses DMA and is split into
  one end per tile.
- A core end of a DMA fifo keeps its own pool of its declared depth:
  `to_mlir` writes every fifo's depths per endpoint, which the lowering
  keeps as given (from a single depth it would resize each core pool to
  the core's largest acquire plus one, `findObjectFifoSize`). A shim end
  has no pool.
- Fifos linked at a memtile share one pool there: a split keeps the
  source's objects, a join the destination's, a forward the source's; its
  depth is the declared depth of that end. A memtile pool that does not
  fit its memtile spills, one buffer at a time, to the emptier neighbouring
  memtile with room (pools taken largest object first, then by fifo name),
  as the lowering does.
- Each pool takes a producer and a consumer lock, one pair per lane of a
  split or join; the producer lock starts at depth x repeat count. A shim
  end takes a lock pair on its shim tile too (the lowering creates one
  although shim tasks do not use it).
- Each DMA end takes a channel on its tile, S2MM into the tile and MM2S
  out, numbered in fifo-name order (IRON's emission order), producer
  before consumers, ends of spilled pools first; a memtile channel uses
  BDs 0-23 when even and 24-47 when odd (`isBdChannelAccessible`).
- A core or memtile channel takes one BD per object of its pool, times the
  lanes of a split or join on the pool's own channel, times its
  `repeat_count` -- except that a one-object pool with no lanes and no
  `iter_count` repeats in hardware with one BD. A shim channel takes one BD
  per runtime task queued on it: a Fill or Drain is live from its statement
  until its group's `Finish` (or the end of the sequence).
- A programmed pool (`Link.programmed`) takes a lock pair per slot, both
  starting at 0, and each of its memtile channels as many BDs as the
  longest chain the runtime pushes onto it. A forward's memtile sends each
  source object in one BD, so both its channels move source objects.
"""

from __future__ import annotations

from collections import defaultdict

import attrs

from iron.design.model import (
    TAP,
    Design,
    Drain,
    Endpoint,
    Fill,
    Finish,
    Link,
    ObjectFifo,
    PoolTask,
    Tile,
)
from iron.design.place import place

S2MM, MM2S = "S2MM", "MM2S"  # into the tile's memory, out of it


@attrs.frozen
class MemoryItem:
    """Bytes one thing takes of a tile's memory: a worker's `stack`, a
    `fifo`'s buffer pool (`count` objects of `nbytes`) or a core-local
    `buffer`. `home` is the memtile a spilled pool belongs to."""

    kind: str  # stack | fifo | buffer
    name: str
    nbytes: int
    count: int = 1
    home: Tile | None = None

    @property
    def total(self) -> int:
        return self.count * self.nbytes

    def __str__(self) -> str:
        if self.kind == "stack":
            return f"stack {self.nbytes} B"
        size = f"{self.count} x {self.nbytes} B" if self.kind == "fifo" else f"{self.nbytes} B"
        spilled = f" (spilled from {self.home})" if self.home else ""
        return f"{self.kind} {self.name} {size}{spilled}"


@attrs.frozen
class Channel:
    """A DMA channel of a tile moving `fifo`'s objects: `bds` descriptors
    (on a shim, the most tasks queued at once) of at most `words` 32-bit
    words each."""

    direction: str  # S2MM | MM2S
    index: int
    fifo: str
    bds: int
    words: int

    def __str__(self) -> str:
        return f"{self.direction} {self.index} {self.fifo}: {self.bds} BDs of {self.words} words"


@attrs.frozen
class Locks:
    """The `count` locks `fifo`'s pool (or shim end) takes on a tile; its
    producer locks start at `start`."""

    fifo: str
    count: int
    start: int

    def __str__(self) -> str:
        return f"{self.fifo} {self.count}"


@attrs.frozen
class TileUsage:
    """Everything a design takes of one tile."""

    tile: Tile
    kind: str  # shim | memtile | core
    memory: tuple[MemoryItem, ...] = ()
    channels: tuple[Channel, ...] = ()
    locks: tuple[Locks, ...] = ()
    #: descriptors in use: the channels' on a core or memtile; on a shim,
    #: the most runtime tasks live at once
    bds: int = 0

    @property
    def memory_bytes(self) -> int:
        return sum(item.total for item in self.memory)

    @property
    def lock_count(self) -> int:
        return sum(lock.count for lock in self.locks)

    def channels_in(self, direction: str) -> tuple[Channel, ...]:
        return tuple(c for c in self.channels if c.direction == direction)

    def memory_text(self) -> str:
        """The memory items, summed: "stack 1024 B + fifo in 2 x 4096 B"."""
        return " + ".join(map(str, self.memory))


def usage(design: Design) -> dict[Tile, TileUsage]:
    """What `design` (placed first) takes of each tile it uses, by tile."""
    design = place(design)
    device = design.device
    memory: dict[Tile, list[MemoryItem]] = defaultdict(list)
    locks: dict[Tile, list[Locks]] = defaultdict(list)
    for worker in design.workers:
        stack = device.core_stack_bytes if worker.stack_size is None else worker.stack_size
        memory[worker.tile].append(MemoryItem("stack", worker.name, stack))
        memory[worker.tile] += [MemoryItem("buffer", b.name, b.nbytes) for b in worker.buffers]

    spilled = _place_memtile_pools(design, memory, locks)
    tasks = shim_tasks(design)
    ends = []  # (tile, direction, fifo, bds, words, spilled)
    for fifo in sorted(design.fifos, key=lambda f: f.name):
        shared = shared_memory_tile(design, fifo)
        if shared is not None:
            depth = fifo.depth_at(fifo.producer)
            memory[shared].append(MemoryItem("fifo", fifo.name, fifo.nbytes, depth))
            locks[shared].append(Locks(fifo.name, 2, depth))
            continue
        for endpoint, direction in _ends(fifo):
            tile = tile_of(design, endpoint)
            words = _words(fifo.nbytes, device.dma_granule)
            repeat = (fifo.repeat_count or 1) if direction == MM2S else 1
            if endpoint.kind == "shim":
                queued = [t for t in tasks if t.statement.fifo == fifo.name]
                bds = max((t.channel_live for t in queued), default=0)
                words = max((t.words for t in queued), default=0)
                locks[tile].append(Locks(fifo.name, 2, 0))
            elif endpoint.kind == "core":
                depth = fifo.depth_at(endpoint)
                memory[tile].append(MemoryItem("fifo", fifo.name, fifo.nbytes, depth))
                locks[tile].append(Locks(fifo.name, 2, depth * repeat))
                bds = _bds(depth, repeat)
            else:
                link = design.link(endpoint.name)
                pool, pool_end = link_pool(design, link)
                lanes = len(link.fifos) - 1 if fifo.name == pool.name else 1
                if lanes > 1:  # the pool's own channel moves one slice per BD
                    slices = [design.fifo(f) for f in link.fifos if f != pool.name]
                    words = max(_words(f.nbytes, device.dma_granule) for f in slices)
                if link.kind == "forward":
                    words = _words(pool.nbytes, device.dma_granule)
                if link.programmed:
                    chains = [
                        len(t.bds)
                        for t in design.sequence
                        if isinstance(t, PoolTask)
                        and t.link == link.name
                        and t.fill == (direction == S2MM)
                    ]
                    bds = max(chains, default=0)
                else:
                    bds = _bds(pool.depth_at(pool_end), repeat, lanes, fifo.iter_count is not None)
            spills = endpoint.kind == "memtile" and endpoint.name in spilled
            ends.append((tile, direction, fifo.name, bds, words, spills))

    channels: dict[Tile, list[Channel]] = defaultdict(list)
    numbered: dict[tuple[Tile, str], int] = defaultdict(int)
    # the lowering numbers the channels of spilled pools first
    for tile, direction, fifo, bds, words, _ in sorted(ends, key=lambda e: not e[5]):
        channels[tile].append(Channel(direction, numbered[tile, direction], fifo, bds, words))
        numbered[tile, direction] += 1

    shim_bds: dict[Tile, int] = defaultdict(int)
    for task in tasks:
        shim_bds[task.tile] = max(shim_bds[task.tile], task.tile_live)
    tiles = sorted({*memory, *locks, *channels})
    return {
        tile: TileUsage(
            tile,
            device.tile_kind(tile.row),
            tuple(memory[tile]),
            tuple(sorted(channels[tile], key=lambda c: (c.direction, c.index))),
            tuple(locks[tile]),
            shim_bds[tile] if tile.row == 0 else sum(c.bds for c in channels[tile]),
        )
        for tile in tiles
    }


@attrs.frozen
class ShimTask:
    """A runtime Fill or Drain as it starts: its shim tile, the tasks then
    live on that tile and queued on its channel, and its BD length."""

    index: int  # in the sequence
    statement: Fill | Drain
    tile: Tile
    tile_live: int
    channel_live: int
    words: int

    @property
    def subject(self) -> str:
        verb, way = ("fill", "from") if isinstance(self.statement, Fill) else ("drain", "to")
        s = self.statement
        return f"transfer {self.index} ({verb} {s.fifo} {way} {s.tensor})"


def shim_tasks(design: Design) -> list[ShimTask]:
    """Every runtime task of the placed `design`, in sequence order."""
    live: dict[str, list[tuple[Tile, str]]] = {}
    out = []
    for index, statement in enumerate(design.sequence):
        if isinstance(statement, Finish):
            live.pop(statement.group, None)
        elif isinstance(statement, (Fill, Drain)):
            fifo = design.fifo(statement.fifo)
            end = fifo.producer if isinstance(statement, Fill) else fifo.consumer("shim")
            live.setdefault(statement.group, []).append((end.tile, fifo.name))
            everything = [task for tasks in live.values() for task in tasks]
            tap = transfer_tap(design, statement).padded()
            per_iteration = tap.count // tap.sizes[0] * fifo.element.nbytes
            words = _words(per_iteration, design.device.dma_granule)
            out.append(
                ShimTask(
                    index,
                    statement,
                    end.tile,
                    sum(tile == end.tile for tile, _ in everything),
                    sum(name == fifo.name for _, name in everything),
                    words,
                )
            )
    return out


@attrs.frozen
class PoolPush:
    """A `PoolTask` as it is pushed: the memtile tile and the pushes then
    queued on its channel (its own included)."""

    index: int  # in the sequence
    task: PoolTask
    tile: Tile
    channel_live: int

    @property
    def subject(self) -> str:
        way = "fill" if self.task.fill else "drain"
        return f"pool task {self.index} ({way} of link {self.task.link})"


def pool_pushes(design: Design) -> list[PoolPush]:
    """Every `PoolTask` of the placed `design`, in sequence order; a push
    stays queued until its group finishes, as a shim task does."""
    live: dict[str, list[tuple[str, bool]]] = {}
    out = []
    for index, statement in enumerate(design.sequence):
        if isinstance(statement, Finish):
            live.pop(statement.group, None)
        elif isinstance(statement, PoolTask):
            channel = (statement.link, statement.fill)
            live.setdefault(statement.group, []).append(channel)
            queued = sum(c == channel for tasks in live.values() for c in tasks)
            out.append(PoolPush(index, statement, design.link(statement.link).tile, queued))
    return out


def transfer_tap(design: Design, statement: Fill | Drain) -> TAP:
    """The TAP a runtime task walks: its own, or all of its tensor in order."""
    return statement.tap or TAP.linear(design.tensor(statement.tensor).size)


def tile_of(design: Design, endpoint: Endpoint) -> Tile | None:
    """The tile an endpoint sits on (None where the design is not placed)."""
    if endpoint.kind == "core":
        return design.worker(endpoint.name).tile
    if endpoint.kind == "memtile":
        return design.link(endpoint.name).tile
    return endpoint.tile


def shared_memory_tile(design: Design, fifo: ObjectFifo) -> Tile | None:
    """The tile whose memory holds `fifo` when mlir-aie lowers it without
    DMA (one core to one reachable core, no reordering, no repeat), or None."""
    if len(fifo.consumers) != 1 or fifo.dims_to_stream or fifo.repeat_count:
        return None
    producer, consumer = fifo.producer, fifo.consumers[0]
    if producer.kind != "core" or consumer.kind != "core" or consumer.dims_from_stream:
        return None
    a, b = tile_of(design, producer), tile_of(design, consumer)
    if _reaches(b, a):
        return a
    return b if _reaches(a, b) else None


def _reaches(core: Tile, memory: Tile) -> bool:
    """AIE2 `isLegalMemAffinity` between core tiles: a core reads its own
    memory and those of its west, north and south neighbours."""
    col, row = core.col, core.row
    return memory in (core, Tile(col - 1, row), Tile(col, row + 1), Tile(col, row - 1))


def link_pool(design: Design, link: Link) -> tuple[ObjectFifo, Endpoint]:
    """The fifo and memtile end whose objects a link's fifos share."""
    if link.kind == "join":
        fifo = design.fifo(link.destinations[0])
        return fifo, fifo.producer
    fifo = design.fifo(link.sources[0])
    return fifo, fifo.consumer("memtile", link.name)


def _ends(fifo: ObjectFifo):
    yield fifo.producer, MM2S
    for consumer in fifo.consumers:
        yield consumer, S2MM


def _bds(depth: int, repeat: int = 1, lanes: int = 1, chained: bool = False) -> int:
    if repeat > 1 and depth == 1 and lanes == 1 and not chained:
        return 1  # the channel's hardware repeat replays the one BD
    return depth * lanes * repeat


def _words(nbytes: int, granule: int) -> int:
    return -(-nbytes // granule)


def _place_memtile_pools(design: Design, memory, locks) -> set[str]:
    """Put each link's pool on its memtile, spilling buffers to a
    neighbouring memtile as the lowering does; returns the links that spilled."""
    device = design.device
    pools = sorted(
        ((link, *link_pool(design, link)) for link in design.links),
        key=lambda pool: (-pool[1].nbytes, pool[1].name),
    )
    spilled = set()
    for link, fifo, end in pools:
        home, depth = link.tile, fifo.depth_at(end)
        placed: dict[Tile, int] = defaultdict(int)

        def used(tile: Tile) -> int:
            items = memory.get(tile, ())
            return sum(i.total for i in items) + placed.get(tile, 0) * fifo.nbytes  # noqa: B023

        for _ in range(depth):
            tile = home
            if used(home) + fifo.nbytes > device.memtile_bytes:
                columns = (home.col - 1, home.col + 1)
                neighbours = sorted(
                    (Tile(c, 1) for c in columns if 0 <= c < device.columns), key=used
                )
                roomy = (t for t in neighbours if used(t) + fifo.nbytes <= device.memtile_bytes)
                tile = next(roomy, home)
            placed[tile] += 1
        for tile, count in placed.items():
            memory[tile].append(
                MemoryItem("fifo", fifo.name, fifo.nbytes, count, None if tile == home else home)
            )
        if set(placed) != {home}:
            spilled.add(link.name)
        if link.programmed:  # a pair per slot, armed by the runtime
            locks[home].append(Locks(fifo.name, 2 * depth, 0))
            continue
        repeats = (design.fifo(f).repeat_count for f in link.destinations)
        repeat = next((r for r in repeats if r), 1)
        locks[home].append(Locks(fifo.name, 2 * (len(link.fifos) - 1), depth * repeat))
    return spilled
