"""`check(design)`: every device limit a design must keep, each broken one
named. Every limit is read from the design's `Device`; what the design takes
of each tile is counted on its lowered form (`iron.design.lower`, through
`iron.design.usage`), the same form the simulator runs and the emitter prints.

Each `Violation` prints as one line,

    <design>: tile (<col>, <row>): <subject>: <rule> <found> <relation> <limit>: <detail>

(the tile and subject left out where there is none), e.g.
``add_one: tile (0, 2): core memory 70656 B > 65536 B: stack 1024 B + fifo in
2 x 4096 B + ...``. The rules:

- placement: workers on core tiles, links on memtiles, shim endpoints on
  shims, all within the device's columns; one worker per tile. Where
  placement is broken the per-tile rules below are not measured.
- per tile: memory (core, memtile), DMA channels per direction, each
  channel's number within its tile's range (a spilled pool's memtile ends
  within 0..3), no two ends pinned to one channel, locks, every lock's
  initial value, BDs (a memtile's even and odd channels each have half of its
  BDs, shared by the static chains and the runtime's pool pushes), every
  channel's BD length.
- runtime transfers (shim BDs, the TAP padded to 4 dimensions, the highest
  being the iteration): iterations 1..`shim_max_iterations`; d0 and d1 wraps
  up to `max_wrap`, d0 counted in 32-bit words, unless the pattern is a
  contiguous row-major scan (mlir-aie lowers it in linear mode); strides in
  whole 4-byte granules (a unit d0 stride excepted) and up to `max_stride`
  words, positive where the size is above 1 (the iteration stride may be
  0); offset and d0 length in whole granules; a d0 stride of 1 for elements
  that are not 32-bit words (the DMA moves whole words); the pattern inside
  its tensor; a whole number of what the fifo's other end moves per object.
- the runtime sequence: BD ids live per shim tile up to `bd_ids_per_shim`; a
  push onto a channel queue (`task_queue_depth`) only where the queue has
  room or an earlier waited task on the channel can be awaited for it (else
  the push may be lost on hardware); every await takes its own task's token
  (the channel's tokens come in push order); no mixing of the default task
  group with named ones (mlir-aie's `Runtime(strict_task_groups=True)`).
- fifo reorders (`dims_to_stream` on the producer's tile, `dims_from_stream`
  on each consumer's): none on a shim (reorder in the runtime TAP instead),
  at most `bd_dims` dimensions, the same wrap, stride and granule rules
  with every stride positive and every wrap limited, as many elements as the
  BD they order, and no element outside it.
- links: a split's destinations repeated alike, a join's destination not
  repeated (what mlir-aie's link lowering can do).
- fifos: acquires up to the endpoint's declared depth (mlir-aie's
  `ObjectFifoHandle.acquire` refuses more); releases and objects passed to
  kernels only of what the worker holds in every iteration that reaches
  them (`iron.design.lower` works out what it holds); a fifo a programmed
  pool feeds held alike in every iteration at each acquire and release;
  `iter_count` in 1..`max_repeat_count` and only on a fifo with a memtile
  end; `repeat_count` in 1..`max_repeat_count` and not on a shim producer;
  objects in whole granules.
- programmed pools: each pushed task's `repeat_count` in
  1..`max_repeat_count` and its BDs' acquire and release values in
  1..`max_lock_value`; each `SetLock` in 0..`max_lock_value`.
- barriers: values set, waited for and released in 0..`max_lock_value`.
- kernel calls: a Memref argument takes an acquired object (held where
  called) or a core buffer of its element type and count (the argument
  count and kinds are refused when the Call is built).
- block-float element types (tensors, fifos, core buffers, kernel
  arguments) only where `device.block_float`.

Where the issue's rules and mlir-aie differ, these follow mlir-aie: the
producer lock starts at depth x repeat count, so that product is what
`max_lock_value` bounds (mlir-aie does not verify it; the lock would
overflow); pools are sized and placed as the lowering does, so a memtile
overflows only when its neighbours cannot take the spill; fifo reorders
need every stride positive (`DMABDOp::verify`). Three rules are stricter
than mlir-aie's verifiers: reorders are held to their tile's wrap and stride
field widths (the verifier checks looser generic bounds and the fields would
be truncated); a runtime pattern must fit one BD as written (mlir-aie may
split an oversized `dma_memcpy_nd` into several BDs, each taking a shim BD
and a queue slot that the rules here do not count); and what a worker holds
is judged over every iteration of a loop whatever its count (mlir-aie's
`verifyObjectFifoOverRelease` looks at each loop body alone).
"""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from collections.abc import Collection

import attrs

from iron.core.device import TileLimits
from iron.design.lower import (
    MM2S,
    S2MM,
    CoreOp,
    Lowered,
    endpoint_tile,
    lower,
    transfer_unit,
)
from iron.design.model import (
    Acquire,
    Buf,
    Call,
    Design,
    DesignError,
    Drain,
    Fill,
    Loop,
    Memref,
    Obj,
    PoolTask,
    Release,
    ReleaseBarrier,
    SetBarrier,
    SetLock,
    Tile,
    WaitBarrier,
    element_type,
    require_design,
)
from iron.design.place import place
from iron.design.usage import tile_usage


@attrs.frozen
class Violation:
    """One broken rule: `found` where the device allows `limit`, in the
    words of `relation` ("found > limit", "found not a multiple of limit")."""

    design: str
    tile: Tile | None
    subject: str  # "fifo in", "kernel add_one_i32", "transfer 0 (fill in from x)", "" for the tile
    rule: str
    found: int | str
    limit: int | str
    relation: str = ">"
    unit: str = ""
    detail: str = ""

    def __str__(self) -> str:
        where = "".join(
            f"{part}: "
            for part in (self.design, self.tile and f"tile {self.tile}", self.subject)
            if part
        )
        text = f"{where}{self.rule} {self.found}{self.unit} {self.relation} {self.limit}{self.unit}"
        return f"{text}: {self.detail}" if self.detail else text


@attrs.frozen
class Report:
    """What `check` found: `ok` when `violations` is empty."""

    design: str
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def __str__(self) -> str:
        if self.ok:
            return f"{self.design}: fits the device"
        lines = [f"{self.design}: {len(self.violations)} violation(s)"]
        return "\n".join(lines + [f"  {v}" for v in self.violations])


def check(design: Design, *, rtp: Collection[str] = ()) -> Report:
    """Measure `design` (placed first) against every limit of its device;
    lowered with `rtp` as runtime-parameter words (`iron.design.lower`),
    as an xclbin holds it, their buffers and locks count too."""
    require_design("check", design)
    name = design.name
    try:
        design = place(design)
    except DesignError as error:
        found = Violation(
            name, None, "", "workers", len(design.workers), design.device.cores, detail=str(error)
        )
        return Report(name, (found,))
    lowered = lower(design, rtp=rtp)
    violations = list(_placement(design))
    rules = [_fifos, _links, _workers, _transfers, _reorders, _block_float, _sequence, _barriers]
    if not violations:
        rules += [_tiles, _pool_tasks]
    for rule in rules:
        violations += rule(lowered)
    return Report(name, tuple(violations))


def validate(design: Design, *, rtp: Collection[str] = ()) -> None:
    """Raise `DesignError` listing every violation, if `design` has any."""
    report = check(design, rtp=rtp)
    if not report.ok:
        raise DesignError(str(report))


def _reporter(design: Design, tile: Tile | None, subject: str):
    return functools.partial(Violation, design.name, tile, subject)


# ---- placement ----------------------------------------------------------------


def _placement(design: Design):
    device = design.device

    def misplaced(tile: Tile, kind: str, rows: str) -> str:
        inside = 0 <= tile.col < device.columns and 0 <= tile.row < device.rows
        if inside and device.tile_kind(tile.row) == kind:
            return ""
        return (
            f"{device.name} at {device.columns} columns has columns 0..{device.columns - 1}, {rows}"
        )

    placed = [
        (w.tile, "core", f"worker {w.name}", f"core rows 2..{device.rows - 1}")
        for w in design.workers
    ]
    placed += [(k.tile, "memtile", f"link {k.name}", "memtile row 1") for k in design.links]
    placed += [
        (end.tile, "shim", f"fifo {fifo.name}", "shim row 0")
        for fifo in design.fifos
        for end in fifo.endpoints
        if end.kind == "shim"
    ]
    for tile, kind, subject, rows in placed:
        if why := misplaced(tile, kind, rows):
            what = "a memtile" if kind == "memtile" else f"a {kind} tile"
            yield _reporter(design, tile, subject)("tile", str(tile), what, "is not", detail=why)
    on_tile = defaultdict(list)
    for worker in design.workers:
        on_tile[worker.tile].append(worker.name)
    for tile, names in on_tile.items():
        if len(names) > 1:
            v = _reporter(design, tile, f"worker {names[1]}")
            yield v("workers on one tile", len(names), 1, detail=", ".join(names))


# ---- per tile ----------------------------------------------------------------


def _tiles(lowered: Lowered):
    design, config = lowered.design, lowered.configuration
    device = design.device
    for tile, used in tile_usage(lowered).items():
        limits = device.limits(used.kind)
        v = _reporter(design, tile, "")
        if used.kind != "shim" and used.memory_bytes > limits.memory_bytes:
            yield v(
                f"{used.kind} memory",
                used.memory_bytes,
                limits.memory_bytes,
                unit=" B",
                detail=used.memory_text(),
            )
        for direction in (S2MM, MM2S):
            channels = used.channels_in(direction)
            if len(channels) > limits.dma_channels:
                yield v(
                    f"{direction} channels",
                    len(channels),
                    limits.dma_channels,
                    detail=", ".join(c.fifo for c in channels),
                )
        if used.lock_count > limits.locks:
            yield v("locks", used.lock_count, limits.locks, detail=" + ".join(map(str, used.locks)))
        if used.kind == "core" and used.bds > limits.bds:
            yield v("BDs", used.bds, limits.bds, detail=_bd_text(used.channels))
        if used.kind == "memtile":  # BDs 0..n/2-1 serve even channels, the rest odd ones
            for parity, side in enumerate(("even", "odd")):
                if used.banks[parity] > limits.bds // 2:
                    channels = [c for c in used.channels if c.index % 2 == parity]
                    yield v(
                        f"{side}-channel BDs",
                        used.banks[parity],
                        limits.bds // 2,
                        detail=_bd_text(channels),
                    )
        for channel in used.channels:
            if channel.words > limits.bd_words:
                yield _reporter(design, tile, f"fifo {channel.fifo}")(
                    "BD length",
                    channel.words,
                    limits.bd_words,
                    unit=" words",
                    detail=f"{channel.direction} {channel.index}",
                )
    for lock in config.locks:
        if lock.init > device.max_lock_value:
            yield _reporter(design, lock.tile, f"fifo {lock.owner}")(
                "producer lock start",
                lock.init,
                device.max_lock_value,
                detail="the pool's depth x its repeat count",
            )
    taken = Counter(c.key for c in config.channels)
    for channel in config.channels:
        v = _reporter(design, channel.tile, f"fifo {channel.fifo} at {channel.end}")
        # an end beyond the tile's channels is counted above; a pinned one, or
        # a spilled pool's end held to channels 0..3, is named here
        restricted = channel.limit < device.limits(channel.kind).dma_channels
        if channel.pinned and taken[channel.key] > 1:
            yield v(
                f"pinned {channel.direction} channel",
                channel.index,
                "taken by another end",
                "is",
                detail="no two ends of a tile share a DMA channel",
            )
        elif channel.index >= channel.limit and (channel.pinned or restricted):
            yield v(
                f"{channel.direction} channel",
                channel.index,
                f"0..{channel.limit - 1}",
                "outside",
                detail="a spilled pool's memtile ends reach its neighbour only through these"
                if restricted
                else f"a {channel.kind} tile has {channel.limit} per direction",
            )


def _bd_text(channels) -> str:
    return " + ".join(f"{c.fifo} ({c.direction} {c.index}) {c.bds}" for c in channels)


def _sequence(lowered: Lowered):
    design, config, runtime = lowered.design, lowered.configuration, lowered.runtime
    device = design.device
    over = set()
    for task in runtime.tasks:
        tile = config.channels[task.channel].tile
        if task.live > device.bd_ids_per_shim and tile not in over:
            over.add(tile)
            yield _reporter(design, tile, task.subject)(
                "live tasks on the shim",
                task.live,
                device.bd_ids_per_shim,
                detail="each task holds a BD id until it is awaited or freed",
            )
    for overflow in {o.channel: o for o in reversed(runtime.overflows)}.values():
        item = runtime.task(overflow.index)  # the first push each channel may lose
        channel = config.channels[overflow.channel]
        yield _reporter(design, channel.tile, item.subject)(
            "tasks queued on the channel",
            overflow.queued,
            device.task_queue_depth,
            detail=f"{channel.direction} {channel.index} of fifo {channel.fifo} queues "
            f"{device.task_queue_depth} tasks and none before this one on it is waited, so "
            "nothing shows there is room; on hardware the push may be lost",
        )
    for misorder in runtime.misorders:
        task, taken = runtime.task(misorder.task), runtime.task(misorder.taken)
        yield _reporter(design, config.channels[task.channel].tile, task.subject)(
            "await takes the token of",
            taken.subject,
            "its own",
            "instead of",
            detail="a channel's completion tokens come in push order; finish the earlier "
            "task's group first",
        )
    groups = {}
    for index, statement in enumerate(design.sequence):
        if isinstance(statement, (Fill, Drain, PoolTask)):
            groups.setdefault(statement.group == "default", index)
    if len(groups) == 2:
        default, named = groups[True], groups[False]
        yield _reporter(design, None, f"sequence[{named}]")(
            "task group",
            repr(design.sequence[named].group),
            f"the default group of sequence[{default}]",
            "mixed with",
            detail="as mlir-aie's Runtime(strict_task_groups=True), a sequence puts every task "
            "in the default group or every task in a named one",
        )


def _pool_tasks(lowered: Lowered):
    design, runtime, config = lowered.design, lowered.runtime, lowered.configuration
    device = design.device
    most = device.max_lock_value
    for push in runtime.pushes:
        task, tile = push.statement, config.channels[push.channel].tile
        v = _reporter(design, tile, push.subject)
        if not 1 <= task.repeat_count <= device.max_repeat_count:
            yield v("repeat_count", task.repeat_count, f"1..{device.max_repeat_count}", "outside")
        for bd in task.bds:
            for what, value in (("acquire", bd.acquire), ("release", bd.release)):
                if not 1 <= value <= most:
                    yield v(
                        f"slot {bd.slot} {what}",
                        value,
                        f"1..{most}",
                        "outside",
                        detail="a lock holds 0..max_lock_value",
                    )
    for index, statement in enumerate(design.sequence):
        if isinstance(statement, SetLock) and not 0 <= statement.value <= most:
            link = design.link(statement.link)
            yield _reporter(design, link.tile, f"set_lock {index} (link {link.name})")(
                f"slot {statement.slot} value", statement.value, f"0..{most}", "outside"
            )


def _barriers(lowered: Lowered):
    design = lowered.design
    most = design.device.max_lock_value
    values = [
        (None, f"sequence[{i}] (set barrier {s.barrier})", s.value)
        for i, s in enumerate(design.sequence)
        if isinstance(s, SetBarrier)
    ]
    for worker in design.workers:
        for op in _walk(worker.body):
            if isinstance(op, (WaitBarrier, ReleaseBarrier)):
                verb = "waits for" if isinstance(op, WaitBarrier) else "releases"
                values.append(
                    (worker.tile, f"worker {worker.name} ({verb} barrier {op.barrier})", op.value)
                )
    for tile, subject, value in values:
        if not 0 <= value <= most:
            yield _reporter(design, tile, subject)(
                "barrier value",
                value,
                f"0..{most}",
                "outside",
                detail="a lock holds 0..max_lock_value",
            )


def _walk(body):
    for op in body:
        yield op
        if isinstance(op, Loop):
            yield from _walk(op.body)


# ---- access patterns -----------------------------------------------------------


def _transfers(lowered: Lowered):
    design, config = lowered.design, lowered.configuration
    device = design.device
    shim = device.limits("shim")
    for task in lowered.runtime.tasks:
        statement = task.statement
        fifo, tensor = design.fifo(statement.fifo), design.tensor(statement.tensor)
        padded = task.tap
        tap = statement.tap or padded
        v = _reporter(design, config.channels[task.channel].tile, task.subject)
        iterations = padded.sizes[0]
        if iterations > device.shim_max_iterations:
            yield v(
                "iterations",
                iterations,
                device.shim_max_iterations,
                detail="the highest dimension is the shim BD's iteration count",
            )
        nbytes = fifo.element.nbytes
        yield from _pattern(
            v, padded.sizes, padded.strides, nbytes, shim, device.dma_granule, iteration=True
        )
        if tap.offset * nbytes % device.dma_granule:
            yield v("offset", tap.offset * nbytes, device.dma_granule, "not a multiple of", " B")
        low, high = _reach(tap.sizes, tap.strides, tap.offset)
        if low < 0 or high >= tensor.size:
            yield v(
                "element",
                low if low < 0 else high,
                f"0..{tensor.size - 1} of tensor {tensor.name}",
                "outside",
                detail=f"TAP {tap}",
            )
        unit = transfer_unit(lowered, task)
        if tap.count % unit:
            yield v(
                "elements",
                tap.count,
                unit,
                "not a multiple of",
                detail=f"fifo {fifo.name}'s other end moves {unit} per object",
            )


def _reorders(lowered: Lowered):
    design, config = lowered.design, lowered.configuration
    device = design.device
    for fifo in design.fifos:
        reorders = [(fifo.producer, MM2S, "dims_to_stream", fifo.dims_to_stream)]
        reorders += [(c, S2MM, "dims_from_stream", c.dims_from_stream) for c in fifo.consumers]
        for end, direction, what, dims in reorders:
            if not dims:
                continue
            v = _reporter(design, endpoint_tile(design, end), f"fifo {fifo.name}")
            if end.kind == "shim":
                yield v(
                    f"{what} dimensions",
                    len(dims),
                    0,
                    ">",
                    detail="a shim moves data in the order of its runtime TAP; reorder there",
                )
                continue
            limits = device.limits(end.kind)
            if len(dims) > limits.bd_dims:
                yield v(
                    f"{what} dimensions",
                    len(dims),
                    limits.bd_dims,
                    detail=f"{end.kind} BDs address {limits.bd_dims} dimensions",
                )
            sizes, strides = [s for s, _ in dims], [t for _, t in dims]
            yield from _pattern(
                v, sizes, strides, fifo.element.nbytes, limits, device.dma_granule, label=what
            )
            channel = next(
                (
                    c
                    for c in config.channels
                    if (c.fifo, c.end, c.direction) == (fifo.name, end.label, direction)
                ),
                None,
            )
            lengths = (
                sorted({bd.length for bd in channel.chain})
                if channel and channel.chain
                else [fifo.size]
            )
            count, (_, reach) = math.prod(sizes), _reach(sizes, strides)
            if count not in lengths:
                yield v(
                    f"{what} elements",
                    count,
                    " or ".join(map(str, lengths)),
                    "!=",
                    detail="the dimensions order every element of the BD they belong to",
                )
            elif reach >= min(lengths):
                yield v(
                    f"{what} element",
                    reach,
                    min(lengths),
                    ">=",
                    detail=f"the BD holds {min(lengths)} elements",
                )


def _reach(sizes, strides, offset: int = 0) -> tuple[int, int]:
    """The lowest and highest element an access pattern touches."""
    spans = [(size - 1) * stride for size, stride in zip(sizes, strides)]
    return offset + sum(min(0, s) for s in spans), offset + sum(max(0, s) for s in spans)


def _pattern(
    v,
    sizes,
    strides,
    nbytes: int,
    limits: TileLimits,
    granule: int,
    *,
    iteration: bool = False,
    label: str = "",
):
    """The rules one BD's dimensions keep (highest first; with `iteration`
    the highest is a shim's iteration dimension, whose stride may be 0 and
    whose wrap is checked by the caller)."""
    prefix = f"{label} " if label else ""
    count = len(sizes)
    names = [f"d{count - 1 - i}" for i in range(count)]
    if iteration:
        names[0] = "iteration"
    inner = count - 1
    for i, (name, size, stride) in enumerate(zip(names, sizes, strides)):
        least = 0 if iteration and i == 0 else 1
        if (size > 1 or not iteration) and stride < least:
            yield v(
                f"{prefix}{name} stride",
                stride,
                least,
                "<",
                detail=f"a dimension of size {size} needs a {'non-negative' if least == 0 else 'positive'} stride",
            )
        elif i == inner and stride != 1 and nbytes != granule:
            yield v(
                f"{prefix}{name} stride",
                stride,
                1,
                "!=",
                detail=f"{nbytes}-byte elements move as whole {granule}-byte words, so only contiguously",
            )
        elif not (i == inner and stride == 1) and stride * nbytes % granule:
            yield v(f"{prefix}{name} stride", stride * nbytes, granule, "not a multiple of", " B")
        elif (size > 1 or i == inner) and stride * nbytes // granule > limits.max_stride:
            yield v(
                f"{prefix}{name} stride",
                stride * nbytes // granule,
                limits.max_stride,
                unit=" words",
            )
    if sizes[inner] * nbytes % granule:
        yield v(f"{prefix}d0 length", sizes[inner] * nbytes, granule, "not a multiple of", " B")
    if iteration and _contiguous(sizes, strides):
        return  # lowered in linear mode: the length field, not the wraps, bounds it
    wrapped = range(count - 2, count) if iteration else range(count)
    for i in wrapped:
        wrap = sizes[i] * nbytes // granule if i == inner else sizes[i]
        if wrap > limits.max_wrap:
            unit = " words" if i == inner else ""
            yield v(
                f"{prefix}{names[i]} wrap",
                wrap,
                limits.max_wrap,
                unit=unit,
                detail=f"{limits.kind} BDs hold wraps of {limits.wrap_bits} bits",
            )


def _contiguous(sizes, strides) -> bool:
    """`isContiguousTransfer`: below the iteration dimension, a row-major scan."""
    _, d2, d1, d0 = sizes
    _, s2, s1, s0 = strides
    return s0 == 1 and (d1 == 1 or s1 == d0) and (d2 == 1 or s2 == d0 * d1)


def pattern_violations(design: Design, task) -> list:
    """The BD-field rules a runtime task's pattern breaks (the simulator
    refuses such a task before it allocates anything for it)."""
    device = design.device
    v = _reporter(design, None, task.subject)
    found = []
    if task.tap.sizes[0] > device.shim_max_iterations:
        found.append(v("iterations", task.tap.sizes[0], device.shim_max_iterations))
    found += _pattern(
        v,
        task.tap.sizes,
        task.tap.strides,
        design.fifo(task.statement.fifo).element.nbytes,
        device.limits("shim"),
        device.dma_granule,
        iteration=True,
    )
    return found


# ---- fifos, workers, kernels ------------------------------------------------------------


def _fifos(lowered: Lowered):
    design = lowered.design
    device = design.device
    for fifo in design.fifos:
        v = _reporter(design, None, f"fifo {fifo.name}")
        if fifo.nbytes % device.dma_granule:
            yield v(
                "object",
                fifo.nbytes,
                device.dma_granule,
                "not a multiple of",
                " B",
                detail=f"DMAs move whole {device.dma_granule}-byte words",
            )
        if fifo.repeat_count is not None:
            if fifo.producer.kind == "shim":
                yield v(
                    "repeat_count",
                    fifo.repeat_count,
                    "a shim producer",
                    "not allowed on",
                    detail="repeat a runtime transfer with its TAP's iteration dimension",
                )
            if fifo.repeat_count > device.max_repeat_count:
                yield v("repeat_count", fifo.repeat_count, device.max_repeat_count)
        if fifo.iter_count is not None:
            if all(end.kind != "memtile" for end in fifo.endpoints):
                yield v(
                    "iter_count",
                    fifo.iter_count,
                    "a fifo without a memtile end",
                    "not allowed on",
                    detail="iter_count bounds a memtile BD chain",
                )
            if fifo.iter_count > device.max_repeat_count:
                yield v("iter_count", fifo.iter_count, device.max_repeat_count)


def _links(lowered: Lowered):
    """What mlir-aie's link lowering can repeat: a split's destinations all
    alike (`ObjectFifoLinkOp::verify`), a join's destination not at all
    (`createMemTileDMA` takes a BD's offset by its index among the repeated
    BDs, past the join's offsets)."""
    design = lowered.design
    for link in design.links:
        destinations = [design.fifo(f) for f in link.destinations]
        v = _reporter(design, link.tile, f"link {link.name}")
        if link.kind == "split" and len({f.repeat_count for f in destinations}) > 1:
            yield v(
                "destination repeat_counts",
                ", ".join(str(f.repeat_count or 1) for f in destinations),
                "one count",
                "not",
                detail="a split's destinations repeat alike",
            )
        if link.kind == "join" and destinations[0].repeat_count:
            yield v(
                "destination repeat_count",
                destinations[0].repeat_count,
                "a join",
                "not allowed on",
                detail="mlir-aie's lowering would take offsets past the join's",
            )


def _workers(lowered: Lowered):
    design = lowered.design
    fifos = {f.name: f for f in design.fifos}
    for core in lowered.configuration.cores:
        worker = design.worker(core.worker)
        yield from _ops(design, fifos, worker, core, core.body)


def _ops(design: Design, fifos, worker, core, body: tuple[CoreOp, ...]):
    for lowered in body:
        op = lowered.op
        if not lowered.held.reached:  # in a loop that runs no time
            continue
        if isinstance(op, (Acquire, Release)):
            fifo = fifos[op.fifo]
            v = _reporter(design, worker.tile, f"fifo {fifo.name}")
            lo, hi = lowered.held.of(op.fifo)
            if isinstance(op, Acquire):
                end = next(e for e in fifo.endpoints if (e.kind, e.name) == ("core", worker.name))
                if op.n > fifo.depth_at(end):
                    yield v(
                        "acquire",
                        op.n,
                        f"depth {fifo.depth_at(end)}",
                        ">",
                        detail=f"worker {worker.name} would hold more objects than its end has",
                    )
            elif op.n > lo:
                yield v(
                    "release",
                    op.n,
                    f"{lo} held",
                    ">",
                    detail=f"worker {worker.name} releases objects it does not hold in every "
                    "iteration that reaches the release",
                )
            if core.end(op.fifo).programmed and lo != hi:
                yield v(
                    f"objects held at an {type(op).__name__.lower()}",
                    f"{lo}..{hi}",
                    "one count",
                    "not",
                    detail=f"fifo {fifo.name} is fed by a programmed pool, whose locks the "
                    "core program takes by counts fixed when it is emitted",
                )
        elif isinstance(op, Call):
            yield from _call(design, fifos, worker, lowered)
        elif isinstance(op, Loop):
            yield from _ops(design, fifos, worker, core, lowered.body)


def _call(design: Design, fifos, worker, lowered: CoreOp):
    """A call's buffers: an object held, or a core buffer, of the kernel's
    element type and count (the argument count and kinds are the Call's
    own: it cannot be built with them wrong)."""
    call = lowered.op
    kernel = call.kernel
    v = _reporter(design, worker.tile, f"kernel {kernel.symbol}")
    buffers = {b.name: b for b in worker.buffers}
    for position, (arg, want) in enumerate(zip(call.args, kernel.args)):
        what = f"argument {position}"
        if isinstance(arg, Obj):
            fifo = fifos[arg.fifo]
            dtype, size = fifo.dtype, fifo.size
            held, _ = lowered.held.of(arg.fifo)
            if arg.index >= held:
                yield v(
                    f"{what} object",
                    arg.index,
                    f"{held} held",
                    ">=",
                    detail=f"worker {worker.name} passes object {arg.index} of fifo {arg.fifo}",
                )
        elif isinstance(arg, Buf):
            dtype, size = buffers[arg.name].dtype, math.prod(buffers[arg.name].shape)
        else:
            continue
        if dtype != want.dtype:
            yield v(f"{what} element type", dtype, want.dtype, "!=")
        elif size != math.prod(want.shape):
            yield v(
                f"{what} elements", size, math.prod(want.shape), "!=", detail=f"{want} wants them"
            )


def _block_float(lowered: Lowered):
    design = lowered.design
    device = design.device
    if device.block_float:
        return
    typed = [(f"tensor {t.name}", t.dtype) for t in design.tensors]
    typed += [(f"fifo {f.name}", f.dtype) for f in design.fifos]
    typed += [(f"worker {w.name}", b.dtype) for w in design.workers for b in w.buffers]
    typed += [
        (f"kernel {k.symbol}", a.dtype)
        for k in design.kernels
        for a in k.args
        if isinstance(a, Memref)
    ]
    for subject, dtype in dict.fromkeys(typed):
        if element_type(dtype).block_float:
            yield _reporter(design, None, subject)(
                "element type",
                dtype,
                f"{device.name} ({device.arch})",
                "unsupported on",
                detail="block-float formats are AIE2P (npu2) only",
            )
