"""What a placed design takes of each tile, counted on its lowered form
(`iron.design.lower`, which says how mlir-aie allocates each part): memory,
DMA channels with their BDs and lengths, locks, buffer descriptors. `check`
measures these against `device.limits(kind)`; `iron design show` prints them.
"""

from __future__ import annotations

from collections import defaultdict

import attrs

from iron.design.lower import MM2S, S2MM, Free, Lowered, MemoryItem, Start, lower
from iron.design.model import Design, Tile

__all__ = ["MM2S", "S2MM", "Channel", "Locks", "MemoryItem", "TileUsage", "tile_usage", "usage"]


@attrs.frozen
class Channel:
    """A DMA channel of a tile moving `fifo`'s objects: `bds` descriptors (a
    static chain's; a runtime-driven channel's most at once) of at most
    `words` 32-bit words each."""

    direction: str  # S2MM | MM2S
    index: int
    fifo: str
    bds: int
    words: int

    def __str__(self) -> str:
        return f"{self.direction} {self.index} {self.fifo}: {self.bds} BDs of {self.words} words"


@attrs.frozen
class Locks:
    """The `count` locks one owner (a fifo's pool or shim end, a barrier)
    takes on a tile; the largest value they start at is `start`."""

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
    #: descriptors in use: a core's static chains; a memtile's static chains and
    #: the most its runtime pushes hold at once; a shim's most live tasks
    bds: int = 0
    #: a memtile's BDs per bank (even channels, odd channels); () elsewhere
    banks: tuple[int, ...] = ()

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
    return tile_usage(lower(design))


def tile_usage(lowered: Lowered) -> dict[Tile, TileUsage]:
    """`usage` of an already lowered design."""
    config, runtime = lowered.configuration, lowered.runtime
    granule = lowered.design.device.dma_granule
    nbytes = {f.name: f.element.nbytes for f in lowered.design.fifos}
    pools = config.pools

    def words(elements: int, fifo: str) -> int:
        return -(-elements * nbytes[fifo] // granule)

    # what runtime-driven channels take at most: shim tasks queued, pool BDs live
    runtime_bds: dict[int, int] = defaultdict(int)
    runtime_words: dict[int, int] = defaultdict(int)
    for task in runtime.tasks:
        per_iteration = task.tap.count // task.tap.sizes[0]
        runtime_bds[task.channel] = max(runtime_bds[task.channel], task.queued)
        runtime_words[task.channel] = max(
            runtime_words[task.channel], words(per_iteration, task.statement.fifo)
        )
    bank_live: dict[tuple[Tile, int], int] = defaultdict(int)
    for push, live in _pool_bds_live(lowered):
        channel = config.channels[push.channel]
        runtime_bds[push.channel] = max(runtime_bds[push.channel], len(push.bd_ids))
        runtime_words[push.channel] = words(pools[channel.pool].size, channel.fifo)
        for bank, count in live.items():
            key = (channel.tile, bank)
            bank_live[key] = max(bank_live[key], count)

    channels: dict[Tile, list[Channel]] = defaultdict(list)
    for i, c in enumerate(config.channels):
        if c.driver == "static":
            bds = len(c.chain)
            longest = max((words(bd.length, c.fifo) for bd in c.chain), default=0)
        else:
            bds, longest = runtime_bds[i], runtime_words[i]
        channels[c.tile].append(Channel(c.direction, c.index, c.fifo, bds, longest))

    locks: dict[Tile, dict[str, list[int]]] = defaultdict(dict)
    for lock in config.locks:
        locks[lock.tile].setdefault(lock.owner, []).append(lock.init)

    shim_live: dict[Tile, int] = defaultdict(int)
    for task in runtime.tasks:
        tile = config.channels[task.channel].tile
        shim_live[tile] = max(shim_live[tile], task.live)

    memory = dict(config.memory)
    out = {}
    for tile in sorted({*memory, *channels, *locks, *shim_live}):
        kind = _kind(tile)
        used = sorted(channels[tile], key=lambda c: (c.direction, c.index))
        static = [len(c.chain) for c in config.channels if c.tile == tile and c.driver == "static"]
        banks: tuple[int, ...] = ()
        if kind == "shim":
            bds = shim_live[tile]
        elif kind == "memtile":
            banks = tuple(
                sum(
                    len(c.chain)
                    for c in config.channels
                    if c.tile == tile and c.driver == "static" and c.index % 2 == parity
                )
                + bank_live[tile, parity]
                for parity in (0, 1)
            )
            bds = sum(banks)
        else:
            bds = sum(static)
        out[tile] = TileUsage(
            tile,
            kind,
            memory.get(tile, ()),
            tuple(used),
            tuple(Locks(owner, len(inits), max(inits)) for owner, inits in locks[tile].items()),
            bds,
            banks,
        )
    return out


def _kind(tile: Tile) -> str:
    return ("shim", "memtile", "core")[min(tile.row, 2)]


def _pool_bds_live(lowered: Lowered):
    """Each pool push with the runtime BD ids then live per memtile bank
    (0: even channels, 1: odd), from its start to its group's finish."""
    config, runtime = lowered.configuration, lowered.runtime
    half = lowered.design.device.memtile_bds // 2
    pushes = {p.index: p for p in runtime.pushes}
    live: dict[Tile, set[int]] = defaultdict(set)
    for op in runtime.ops:
        if isinstance(op, Start) and op.task in pushes:
            push = pushes[op.task]
            tile = config.channels[push.channel].tile
            live[tile] |= set(push.bd_ids)
            yield (
                push,
                {parity: sum(1 for i in live[tile] if (i >= half) == parity) for parity in (0, 1)},
            )
        elif isinstance(op, Free) and op.task in pushes:
            push = pushes[op.task]
            live[config.channels[push.channel].tile] -= set(push.bd_ids)
