"""`lower(design) -> Lowered`: the one normal form of a placed design.

It says, as plain data, everything the hardware is configured with and
everything the host does per call, as mlir-aie (at commit 3ca0193ce) would
make it of the MLIR `to_mlir` prints. `usage` and `check` count it, the
simulator builds its machine from it and the emitter prints it, so the four
cannot disagree about a depth, a channel, a lock or a BD.

    Lowered
      configuration  what a device image holds (an xclbin, or the device part of
                     a full ELF): pools of buffers with their tiles, locks with
                     their initial values, DMA channels with ONE numbering and
                     their BD chains, the streams between channels, core
                     programs (acquire / call / release with the objects each
                     holds), kernels, parameters. `configuration.digest()`:
                     two designs with equal configurations are one image.
      runtime        what the host instruction stream does per call: tasks
                     pushed onto shim and memtile channel queues (with their BD
                     ids and queue slots), awaits, frees, lock sets.

How mlir-aie's ObjectFifo lowering (lib/Dialect/AIE/Transforms/
AIEObjectFifoStatefulTransform.cpp, cited below by function) makes each part:

- A fifo from one core to one core sharing memory (`isSharedMemory`:
  `isLegalMemAffinity` either way) with no dimensions or repeat needs no DMA
  (`requiresDMAs`): one pool of the producer's depth, in the producer's memory
  unless only the producer reaches the consumer's. Every other fifo is split
  into one end per tile.
- Depths. A fifo whose endpoints all have one depth is emitted with that one
  number (mlir-aie's `ObjectFifo._get_depths`); the lowering then sizes each
  core end's pool to the largest acquire of that fifo on the core plus one
  (one, for a depth-1 fifo acquired one at a time), and keeps the number on a
  memtile end and for a core that never acquires it (`findObjectFifoSize`).
  Endpoints of different depths are emitted per endpoint and kept as given.
- A memtile link's pool holds the larger objects: a split's source, a join's
  destination, a forward's larger side (`createObjectFifoElements`), in that
  end's depth. A split or join has a lock pair per lane; lane i moves its
  offset up to the next one (`link_lanes`). Memtile pools are placed largest
  object first, in IR order otherwise, each buffer on its home memtile or,
  when that is full, on the emptier neighbour with room
  (`createObjectFifoElements`); a programmed pool's slots are aie.buffers the
  pass neither sees nor moves.
- Locks: a producer lock starting at depth x repeat count and a consumer lock
  at 0, per lane (`createObjectFifoLocks`); a shim end takes a pair too; a
  programmed pool a pair per slot, both at 0; a barrier one lock per worker
  using it.
- Channels: first the ones the design fixes (a programmed pool's, at the top
  of each tile's range; pinned endpoints, `reservePinnedChannels`), then each
  DMA end the lowest free channel of its tile, ends of spilled pools first and
  within channels 0..3 (`assignDMAChannelIndices`,
  `getMaxChannelNumForAdjacentMemTile`), in IR order, producer before
  consumers. A memtile channel's BDs come from its bank: 0..23 for even
  channels, 24..47 for odd ones (`isBdChannelAccessible`).
- Runtime parameters on an xclbin (`lower(design, rtp=names)`): XRT gives a
  run no parameter scratchpad there, so each named parameter a core reads
  is a word of that core's runtime-parameter buffer instead, as mlir-aie's
  IRON makes one (python/iron/buffer.py `Buffer(use_write_rtp=True)`: an
  ``aie.buffer`` with a symbol on the worker's tile). The sequence writes
  the call's words first (``aiex.npu.rtp_write``, include/aie/Dialect/AIEX/
  IR/AIEX.td; a ``npu.write32`` at the buffer's address, lib/Dialect/AIEX/
  Transforms/AIEDmaToNpu.cpp `RtpToWrite32Pattern`), then sets one barrier
  lock per reading core to 1 (``aiex.set_lock``, as python/iron/worker.py
  `WorkerRuntimeBarrier.set` lowers). The core waits for its lock to be 1
  once, before its loop (``aie.use_lock(Acquire, 1)``, which blocks until
  the lock is 1 and leaves it so: AIEOps.td `UseLockOp`), and reads a word
  where it uses the parameter: the preamble mlir-aie's own scratchpad
  lowering gives each reading core (lib/Dialect/AIEX/Transforms/
  AIELowerScratchpadParameters.cpp `emitCorePreambles`, `lowerReadParameters`:
  a lock at 0, an acquire of 1 at the top of the core, a set to 1 after the
  writes, a ``memref.load`` per read). A later call's words are written
  before its fills, so a core whose reads follow an acquire reads them
  once that call's data reaches it. A core that reads a word before its
  first acquire (FLMGemm's slab and work counts at the top of its body:
  an iteration is a call) would read the last call's words at the next
  iteration's top, before the next call writes; there is no PDI reload
  between an xclbin's runs to restart it as the full ELF's scratchpad
  relies on. Such a core waits at the top of every iteration and releases
  1 at its end, leaving the lock at 2 until the next call sets it to 1, as
  mlir-aie's programming_examples/ml/mm_activation_epilogue does with a
  `WorkerRuntimeBarrier` (`wait_for_value(1)`, a pass,
  `release_with_value(1)`, the sequence's `set(1)` per pass).
  The buffer and the lock count in the tile's memory and locks.
- BD chains (`createAIETileDMA`, `createMemTileDMA`): one BD per buffer (per
  lane on a split's or join's own channel), each repeated `repeat_count` times
  unless the pool has one buffer, when the channel's hardware repeat replays
  one BD; a memtile forward moves whole pool objects on both channels.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
from collections import defaultdict
from collections.abc import Collection

import attrs

from iron.design.model import (
    TAP,
    Acquire,
    Design,
    DesignError,
    Drain,
    Endpoint,
    Fill,
    Finish,
    Kernel,
    Link,
    LocalBuffer,
    Loop,
    ObjectFifo,
    Param,
    PoolTask,
    Release,
    ReleaseBarrier,
    SetBarrier,
    SetLock,
    Tile,
    WaitBarrier,
    canonical,
    link_lanes,
    walk,
)
from iron.design.place import place

S2MM, MM2S = "S2MM", "MM2S"  # into a tile's memory, out of it
#: channels a spilled pool's ends may take on a memtile (AIE2 target model
#: `getMaxChannelNumForAdjacentMemTile`: only they reach a neighbour's memory)
ADJACENT_CHANNELS = 4


# ---- the configuration ---------------------------------------------------------------


@attrs.frozen
class Lock:
    """One lock of a tile, its value when the device is configured."""

    tile: Tile
    owner: str  # the fifo whose pool (or shim end) it guards, or "barrier <name>"
    role: str  # producer | consumer | barrier (a programmed pool's: "producer slot 3"...)
    init: int

    def __str__(self) -> str:
        return f"the {self.role} lock of {self.owner if self.role == 'barrier' else 'fifo ' + self.owner}"


@attrs.frozen
class Lane:
    """The part of every slot of a pool one fifo fills or empties, with its
    lock pair (indices into `Configuration.locks`)."""

    fifo: str
    offset: int
    length: int
    producer: int | None
    consumer: int | None


@attrs.frozen
class Pool:
    """Buffers of one object type on a tile, with their locks: a fifo end on
    a core, a shared core pool, a memtile link's pool, or a programmed pool
    (`slot_locks`: a lock pair per slot instead of lanes)."""

    name: str  # the fifo whose objects the slots hold
    kind: str  # core | shared | memtile | programmed
    tile: Tile  # home
    shape: tuple[int, ...]
    dtype: str
    nbytes: int  # per slot
    depth: int
    tiles: tuple[Tile, ...]  # where each slot lives (a memtile pool may spill)
    lanes: tuple[Lane, ...]
    slot_locks: tuple[tuple[int, int], ...] = ()
    link: str | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@attrs.frozen
class Bd:
    """One buffer descriptor of a static chain: moves `length` elements of
    slot `slot` from `offset` (through `dims`), taking `acquire` from the
    lane's lock on its side and giving `release` to the other."""

    slot: int
    lane: int
    offset: int
    length: int
    dims: tuple[tuple[int, int], ...]
    acquire: int = 1
    release: int = 1


@attrs.frozen
class Channel:
    """A DMA channel of a tile and what drives it: its static BD `chain`
    (walked round and round, or `iterations` times), or the runtime (a shim
    channel's tasks, a programmed pool's pushes)."""

    tile: Tile
    kind: str  # the tile's: shim | memtile | core
    direction: str  # S2MM | MM2S
    index: int
    fifo: str  # the fifo whose stream it moves
    end: str  # the endpoint's label: runtime, core w, memtile l
    pool: int | None  # into Configuration.pools
    chain: tuple[Bd, ...] = ()
    iterations: int | None = None
    driver: str = "static"  # static | runtime | pool
    limit: int = 0  # the channel numbers it may take: 0..limit-1
    pinned: bool = False

    @property
    def key(self) -> tuple[Tile, str, int]:
        return (self.tile, self.direction, self.index)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.tile} {self.direction} {self.index}"


@attrs.frozen
class Stream:
    """A fifo's route: its producer's channel to every consumer's, in lockstep
    (indices into `Configuration.channels`)."""

    fifo: str
    source: int
    sinks: tuple[int, ...]


@attrs.frozen
class End:
    """A worker's end of a fifo: its pool (into `Configuration.pools`), the
    side it takes, and how many lock counts one object is worth (a producer
    with a repeat count sends each object that many times)."""

    fifo: str
    pool: int
    producer: bool
    counts: int = 1
    programmed: bool = False  # fed by a programmed pool: emitted as locks, not a fifo


@attrs.frozen
class Held:
    """The objects of each fifo a worker holds just before an op, over every
    iteration that reaches it: (fifo, fewest, most). An op no iteration
    reaches (in a loop of count 0) is not `reached`."""

    fifos: tuple[tuple[str, int, int], ...] = ()
    reached: bool = True

    def of(self, fifo: str) -> tuple[int, int]:
        return next(((lo, hi) for f, lo, hi in self.fifos if f == fifo), (0, 0))


@attrs.frozen
class CoreOp:
    """One op of a core program with what the worker holds before it: an
    Acquire, Release, Call, WaitBarrier or ReleaseBarrier of the design, or a
    Loop whose `body` is lowered in turn."""

    op: object
    held: Held
    body: tuple[CoreOp, ...] = ()


@attrs.frozen
class RtpBuffer:
    """A core's runtime-parameter buffer: word i holds parameter
    `params[i]` for the call; the runtime releases the core to read them
    through the barrier lock `lock` (into `Configuration.locks`)."""

    worker: str
    tile: Tile
    params: tuple[str, ...]
    lock: int
    #: the core reads a word before its first acquire of an iteration (a
    #: loop count at the top of its body: an iteration is a call), so it
    #: waits for the lock at the top of every iteration and releases it at
    #: the end; otherwise it waits once, before its loop, and the data a
    #: call brings orders its reads after that call's writes
    each_iteration: bool = attrs.field(default=False, metadata={"omitted_at_default": True})

    @property
    def symbol(self) -> str:
        return f"rtp_{self.worker}"

    @property
    def nbytes(self) -> int:
        return 4 * len(self.params)  # an i32 word each


@attrs.frozen
class Core:
    worker: str
    tile: Tile
    stack: int
    buffers: tuple[LocalBuffer, ...]
    ends: tuple[End, ...]
    barrier_locks: tuple[tuple[str, int], ...]  # barrier -> lock
    forever: bool
    body: tuple[CoreOp, ...]
    #: its runtime-parameter buffer (into `Configuration.rtps`), if it has
    #: one: the core waits for its lock before its loop, reads words at uses
    rtp: int | None = attrs.field(default=None, metadata={"omitted_at_default": True})

    def end(self, fifo: str) -> End:
        return next(e for e in self.ends if e.fifo == fifo)

    def barrier_lock(self, barrier: str) -> int:
        return dict(self.barrier_locks)[barrier]


@attrs.frozen
class MemoryItem:
    """Bytes one thing takes of a tile's memory: a worker's `stack`, a
    pool's slots on this tile (`count` of `nbytes`) or a core `buffer`.
    `home` is the memtile a spilled pool belongs to."""

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
class Configuration:
    """What the device image holds. Everything here is fixed for the life of
    a loaded image; the runtime sequence only moves data through it."""

    device: str  # its key: name, arch, columns x rows
    tiles: tuple[Tile, ...]
    pools: tuple[Pool, ...]
    locks: tuple[Lock, ...]
    channels: tuple[Channel, ...]
    streams: tuple[Stream, ...]
    cores: tuple[Core, ...]
    memory: tuple[tuple[Tile, tuple[MemoryItem, ...]], ...]
    kernels: tuple[Kernel, ...]
    params: tuple[str, ...]
    fifo_depths: tuple[tuple[str, int | tuple[int, ...]], ...]  # as emitted
    #: the cores' runtime-parameter buffers (`lower(design, rtp=...)`)
    rtps: tuple[RtpBuffer, ...] = attrs.field(default=(), metadata={"omitted_at_default": True})

    def digest(self) -> str:
        """Equal for two designs that make the same device image."""
        return hashlib.sha256(canonical(self).encode()).hexdigest()[:32]

    def channel(self, key: tuple[Tile, str, int]) -> Channel:
        return next(c for c in self.channels if c.key == key)

    def core(self, worker: str) -> Core:
        return next(c for c in self.cores if c.worker == worker)

    def memory_of(self, tile: Tile) -> tuple[MemoryItem, ...]:
        return dict(self.memory).get(tile, ())


# ---- the runtime sequence ----------------------------------------------------------------


@attrs.frozen
class Task:
    """A Fill or Drain: one shim BD (`bd_id`) pushed onto its fifo's shim
    channel. `queued` counts the tasks then on the channel not yet known to
    be done (itself included), `live` the BD ids then taken on the tile."""

    index: int  # in the design's sequence
    statement: Fill | Drain
    channel: int  # into Configuration.channels
    tap: TAP  # padded to four dimensions; the highest repeats the BD
    bd_id: int
    queued: int
    live: int

    @property
    def subject(self) -> str:
        verb, way = ("fill", "from") if isinstance(self.statement, Fill) else ("drain", "to")
        s = self.statement
        return f"transfer {self.index} ({verb} {s.fifo} {way} {s.tensor})"


@attrs.frozen
class Push:
    """A PoolTask: a chain of slot BDs (`bd_ids`, from the top of the
    channel's bank) pushed onto a programmed pool's memtile channel."""

    index: int
    statement: PoolTask
    channel: int
    bd_ids: tuple[int, ...]
    queued: int

    @property
    def subject(self) -> str:
        way = "fill" if self.statement.fill else "drain"
        return f"pool task {self.index} ({way} of link {self.statement.link})"


@attrs.frozen
class Await:
    """Wait for the next task-completion token of a task's channel
    (`aiex.dma_await_task`, lowered to `npu.sync` on the channel), which
    returns that task's BD ids. `token_of` is the task whose token it takes:
    the oldest not yet taken on that channel. It finishes `group`, or (None)
    makes room in the channel's queue for the push at `at`."""

    task: int  # sequence index of the task awaited
    token_of: int
    at: int  # sequence index of the statement it belongs to (len(sequence): the end)
    group: str | None


@attrs.frozen
class Free:
    """Return a task's BD ids (`aiex.dma_free_task`)."""

    task: int
    at: int


@attrs.frozen
class SetLocks:
    """Set locks (into `Configuration.locks`) to `value` (`aiex.set_lock`)."""

    locks: tuple[int, ...]
    value: int
    at: int


@attrs.frozen
class Start:
    """Configure and start a task or push (by sequence index)."""

    task: int


@attrs.frozen
class WriteRtp:
    """Write the call's value of parameter `param` into word `index` of
    runtime-parameter buffer `buffer` (`aiex.npu.rtp_write`)."""

    buffer: int  # into Configuration.rtps
    index: int
    param: str
    at: int


RuntimeOp = Start | Await | Free | SetLocks | WriteRtp


@attrs.frozen
class QueueOverflow:
    """A push onto a channel whose queue may be full with no earlier task on
    the channel to await for room: on hardware the push is lost."""

    index: int
    channel: int
    queued: int


@attrs.frozen
class TokenMisorder:
    """An await that would take another task's token: the channel's tokens
    come in push order, and an older task on it has one not yet taken."""

    index: int  # the statement finishing
    task: int
    taken: int


@attrs.frozen
class Runtime:
    """What the host does per call, in order (`ops`), and the facts `check`
    judges it by."""

    tasks: tuple[Task, ...]
    pushes: tuple[Push, ...]
    ops: tuple[RuntimeOp, ...]
    overflows: tuple[QueueOverflow, ...]
    misorders: tuple[TokenMisorder, ...]

    def task(self, index: int) -> Task | Push:
        return next(t for t in (*self.tasks, *self.pushes) if t.index == index)


@attrs.frozen
class Lowered:
    design: Design  # placed
    configuration: Configuration
    runtime: Runtime


# ---- lowering ---------------------------------------------------------------------------


def lower(design: Design, *, rtp: Collection[str] = ()) -> Lowered:
    """The lowered form of `design` (placed first). `rtp` names the
    parameters an xclbin carries as runtime-parameter words (per-call
    values its cores read; see the module docstring); the others stay
    scratchpad words or constants."""
    design = place(design)
    unknown = sorted(set(rtp) - set(design.params))
    if unknown:
        raise DesignError(
            f"design {design.name}: runtime-parameter word {unknown[0]!r} is not one of its "
            f"parameters (params: {', '.join(design.params) or 'none'})"
        )
    builder = _Builder(design, frozenset(rtp))
    configuration = builder.configuration()
    return Lowered(design, configuration, builder.runtime())


def core_params(worker) -> tuple[str, ...]:
    """The parameters `worker` reads (loop counts and kernel scalars), in
    order of first use."""
    read = []
    for op in walk(worker.body):
        args = [op.count] if isinstance(op, Loop) else list(getattr(op, "args", ()))
        read += [a.name for a in args if isinstance(a, Param)]
    return tuple(dict.fromkeys(read))


def reads_before_acquire(body, words: frozenset[str]) -> bool:
    """Whether `body` reads one of `words` (a loop count or a kernel
    scalar) before its first acquire, in the order it runs."""
    return _first_of(body, words) == "read"


def _first_of(body, words: frozenset[str]) -> str | None:
    """ "read" or "acquire", whichever `body` does first; None: neither."""
    for op in body:
        if isinstance(op, Acquire):
            return "acquire"
        args = [op.count] if isinstance(op, Loop) else list(getattr(op, "args", ()))
        if any(isinstance(a, Param) and a.name in words for a in args):
            return "read"
        found = _first_of(op.body, words) if isinstance(op, Loop) else None
        if found is not None:
            return found
    return None


def lower_stream(lowered: Lowered, design: Design) -> Lowered:
    """`design` lowered against `lowered`'s configuration, for a design that
    differs from `lowered.design` only in its runtime sequence and runtime
    tensors (a runtime-shaped operator at another value of a dispatch-time
    parameter): only the sequence is lowered again, as an instructions-only
    compile against an existing image is (placement never touches the
    sequence, so `lowered`'s placed workers and fifos serve). The
    configuration is not compared here; the caller that keys streams by it
    checks that the design makes the same one where it can afford to.

    mlir-aie keeps the two apart the same way: in its instruction-sequence
    flow the xclbin holds the array configuration and each runtime sequence
    is its own NPU instruction binary, streamed at dispatch time
    (tools/aiecc/README.md "Instruction-sequence + xclbin flow"; the
    `npu-insts` output, ``insts_{0}.bin``, in tools/aiecc/CommandLineOptions.h)."""
    # both designs were checked when made, and their structure is one: the
    # placed design takes the new tensors and sequence without a second
    # structural check (a fifth of a stream's cost at a thousand statements)
    placed = copy.copy(lowered.design)
    object.__setattr__(placed, "tensors", design.tensors)
    object.__setattr__(placed, "sequence", design.sequence)
    config = lowered.configuration
    builder = _Builder(placed)
    builder.channels, builder.pools, builder.cores, builder.rtps = (
        list(config.channels),
        list(config.pools),
        config.cores,
        list(config.rtps),
    )
    builder.pool_of_link = {p.link: i for i, p in enumerate(config.pools) if p.link is not None}
    return Lowered(placed, config, builder.runtime())


def transfer_unit(lowered: Lowered, task: Task) -> int:
    """Elements a runtime task's fifo moves per object at its other end(s):
    a task moves whole ones. A fill feeds every consumer's channel; a drain
    takes what the producer's channel sends (a repeated object once)."""
    config = lowered.configuration
    fifo = lowered.design.fifo(task.statement.fifo)
    stream = next(s for s in config.streams if s.fifo == fifo.name)
    ends = stream.sinks if isinstance(task.statement, Fill) else (stream.source,)
    unit = 1
    for index in ends:
        channel = config.channels[index]
        if channel.driver == "static":
            lanes = {bd.lane: bd.length for bd in channel.chain if bd.slot == 0}
            unit = math.lcm(unit, sum(lanes.values()))
        elif channel.driver == "pool":
            unit = math.lcm(unit, config.pools[channel.pool].size)
        else:
            unit = math.lcm(unit, fifo.size)
    return unit


def endpoint_tile(design: Design, endpoint: Endpoint) -> Tile:
    """The tile an endpoint of the placed `design` sits on."""
    if endpoint.kind == "core":
        return design.worker(endpoint.name).tile
    if endpoint.kind == "memtile":
        return design.link(endpoint.name).tile
    return endpoint.tile


def emitted_depth(fifo: ObjectFifo) -> int | tuple[int, ...]:
    """The depth `to_mlir` writes: one number when every endpoint has it (as
    mlir-aie's `ObjectFifo._get_depths` gives it), else one per endpoint."""
    depths = tuple(fifo.depth_at(e) for e in fifo.endpoints)
    return depths[0] if len(set(depths)) == 1 else depths


def shared_memory_tile(design: Design, fifo: ObjectFifo) -> Tile | None:
    """The tile whose memory holds `fifo` when mlir-aie lowers it without DMA
    (one core to one core that shares memory, no reordering, no repeat:
    `requiresDMAs`), or None."""
    if len(fifo.consumers) != 1 or fifo.dims_to_stream or fifo.repeat_count:
        return None
    producer, consumer = fifo.producer, fifo.consumers[0]
    if producer.kind != "core" or consumer.kind != "core" or consumer.dims_from_stream:
        return None
    a, b = endpoint_tile(design, producer), endpoint_tile(design, consumer)
    if _reaches(b, a):  # the consumer reads the producer's memory
        return a
    return b if _reaches(a, b) else None


def _reaches(core: Tile, memory: Tile) -> bool:
    """AIE2 `isLegalMemAffinity` between core tiles: a core reads its own
    memory and those of its west, north and south neighbours."""
    dc, dr = memory.col - core.col, memory.row - core.row
    return (dc, dr) in ((0, 0), (-1, 0), (0, 1), (0, -1))


def link_pool_end(design: Design, link: Link) -> tuple[ObjectFifo, Endpoint]:
    """The fifo and memtile end whose objects a link's pool holds
    (`createObjectFifoElements`): a join's destination, a split's source, a
    forward's larger side (its source when the sizes are equal)."""
    source, destination = design.fifo(link.sources[0]), design.fifo(link.destinations[0])
    if link.kind == "join" or (link.kind == "forward" and destination.size > source.size):
        return destination, destination.producer
    return source, source.consumer("memtile", link.name)


def link_repeat(design: Design, link: Link) -> int:
    """The repeat count of a link: its first destination's that has one
    (`ObjectFifoLinkOp::getRepeatCount`)."""
    repeats = (design.fifo(f).repeat_count for f in link.destinations)
    return next((r for r in repeats if r), 1)


def max_acquire(worker, fifo: str) -> int:
    """The most objects of `fifo` any acquire of `worker` asks for."""
    return max(
        (op.n for op in walk(worker.body) if isinstance(op, Acquire) and op.fifo == fifo), default=0
    )


class _Builder:
    def __init__(self, design: Design, rtp: frozenset[str] = frozenset()):
        self.design = design
        self.rtp = rtp
        self.rtps: list[RtpBuffer] = []
        self.rtp_of: dict[str, int] = {}  # worker -> its buffer
        self.device = design.device
        self.pools: list[Pool] = []
        self.locks: list[Lock] = []
        self.channels: list[Channel] = []
        self.memory: dict[Tile, list[MemoryItem]] = defaultdict(list)
        self.programmed = {k.name: k for k in design.links if k.programmed}
        self.fed = {k.destinations[0]: k for k in self.programmed.values()}
        #: the fifos a programmed pool emits as its own routes, not objectfifos
        self.legs = {f for k in self.programmed.values() for f in k.fifos}
        self.cores: tuple[Core, ...] = ()
        self.pool_of_link: dict[str, int] = {}
        self.pool_of_end: dict[tuple[str, str], int] = {}  # (fifo, endpoint label) -> pool
        self.shared: dict[str, int] = {}  # fifo -> shared pool

    # ---- helpers

    def _lock(self, tile: Tile, owner: str, role: str, init: int) -> int:
        self.locks.append(Lock(tile, owner, role, init))
        return len(self.locks) - 1

    def _pair(self, tile: Tile, owner: str, init: int) -> tuple[int, int]:
        return (
            self._lock(tile, owner, "producer", init),
            self._lock(tile, owner, "consumer", 0),
        )

    def _pool(self, pool: Pool) -> int:
        self.pools.append(pool)
        return len(self.pools) - 1

    def _end_depth(self, fifo: ObjectFifo, end: Endpoint) -> int:
        """A core end's pool depth as `findObjectFifoSize` sizes it."""
        depth = emitted_depth(fifo)
        if isinstance(depth, tuple):
            return fifo.depth_at(end)
        most = max_acquire(self.design.worker(end.name), fifo.name)
        if most == 0:
            return depth
        return 1 if most == 1 and depth == 1 else most + 1

    # ---- the configuration

    def configuration(self) -> Configuration:
        design = self.design
        for worker in design.workers:
            stack = self.device.core_stack_bytes if worker.stack_size is None else worker.stack_size
            self.memory[worker.tile].append(MemoryItem("stack", worker.name, stack))
            self.memory[worker.tile] += [
                MemoryItem("buffer", b.name, b.nbytes) for b in worker.buffers
            ]
            words = tuple(p for p in core_params(worker) if p in self.rtp)
            if words:
                lock = self._lock(worker.tile, f"rtp_{worker.name}", "barrier", 0)
                self.rtp_of[worker.name] = len(self.rtps)
                early = reads_before_acquire(worker.body, frozenset(words))
                self.rtps.append(RtpBuffer(worker.name, worker.tile, words, lock, early))
                self.memory[worker.tile].append(
                    MemoryItem("buffer", self.rtps[-1].symbol, self.rtps[-1].nbytes)
                )
        self._link_pools()
        self._fifo_pools()
        self._channels()
        streams = self._streams()
        self.cores = cores = tuple(self._core(w) for w in design.workers)
        for pool in self.pools:
            homes = defaultdict(int)
            for tile in pool.tiles:
                homes[tile] += 1
            for tile, count in homes.items():
                home = pool.tile if tile != pool.tile else None
                self.memory[tile].append(MemoryItem("fifo", pool.name, pool.nbytes, count, home))
        tiles = {
            *self.memory,
            *(lock.tile for lock in self.locks),
            *(c.tile for c in self.channels),
        }
        tiles |= {w.tile for w in design.workers} | {k.tile for k in design.links}
        return Configuration(
            self.device.key,
            tuple(sorted(tiles)),
            tuple(self.pools),
            tuple(self.locks),
            tuple(self.channels),
            streams,
            cores,
            tuple(sorted((t, tuple(items)) for t, items in self.memory.items())),
            design.kernels,
            design.params,
            tuple((f.name, emitted_depth(f)) for f in design.fifos if f.name not in self.legs),
            tuple(self.rtps),
        )

    def _link_pools(self) -> None:
        """Every link's pool on its memtile; objectfifo pools largest first,
        in IR order otherwise, spilling as the lowering does."""
        design = self.design
        order = {f.name: i for i, f in enumerate(design.fifos)}

        def ir_position(link: Link):
            fifo, end = link_pool_end(design, link)
            # a memtile consumer end is created right after its fifo
            return (order[fifo.name], 0 if end is fifo.producer else 1)

        lowered = [k for k in design.links if not k.programmed]
        lowered.sort(key=lambda k: (-link_pool_end(design, k)[0].nbytes, ir_position(k)))
        placed: dict[Tile, int] = defaultdict(int)  # objectfifo bytes per memtile
        for link in lowered:
            self._link_pool(link, placed)
        for link in self.programmed.values():
            self._programmed_pool(link)

    def _link_pool(self, link: Link, placed) -> None:
        design = self.design
        fifo, end = link_pool_end(design, link)
        depth, home, nbytes = fifo.depth_at(end), link.tile, fifo.nbytes
        tiles = []
        for _ in range(depth):
            tile = home
            if placed[home] + nbytes > self.device.memtile_bytes:
                neighbours = sorted(
                    (
                        Tile(c, 1)
                        for c in (home.col - 1, home.col + 1)
                        if 0 <= c < self.device.columns
                    ),
                    key=lambda t: placed[t],
                )
                tile = next(
                    (t for t in neighbours if placed[t] + nbytes <= self.device.memtile_bytes), home
                )
            placed[tile] += nbytes
            tiles.append(tile)
        init = depth * link_repeat(design, link)
        if link.kind == "forward":
            lanes_spec = [(fifo.name, 0, fifo.size)]
        else:
            lanes_spec = list(link_lanes(design, link))
        lanes = []
        for name, offset, length in lanes_spec:
            producer, consumer = self._pair(home, fifo.name, init)
            lanes.append(Lane(name, offset, length, producer, consumer))
        self.pool_of_link[link.name] = self._pool(
            Pool(fifo.name, "memtile", home, fifo.shape, fifo.dtype, nbytes, depth,
                 tuple(tiles), tuple(lanes), link=link.name)
        )  # fmt: skip

    def _programmed_pool(self, link: Link) -> None:
        fifo = self.design.fifo(link.sources[0])
        depth, home = fifo.depth_at(fifo.consumer("memtile", link.name)), link.tile
        slot_locks = tuple(
            (
                self._lock(home, fifo.name, f"producer slot {i}", 0),
                self._lock(home, fifo.name, f"consumer slot {i}", 0),
            )
            for i in range(depth)
        )
        lane = Lane(fifo.name, 0, fifo.size, None, None)
        self.pool_of_link[link.name] = self._pool(
            Pool(fifo.name, "programmed", home, fifo.shape, fifo.dtype, fifo.nbytes, depth,
                 (home,) * depth, (lane,), slot_locks, link.name)
        )  # fmt: skip

    def _fifo_pools(self) -> None:
        """Core ends' pools (and shared pools), and the shim ends' lock pairs."""
        design = self.design
        for fifo in design.fifos:
            tile = shared_memory_tile(design, fifo)
            if tile is not None:
                depth = fifo.depth_at(fifo.producer)
                pair = self._pair(tile, fifo.name, depth)
                lane = Lane(fifo.name, 0, fifo.size, *pair)
                self.shared[fifo.name] = self._pool(
                    Pool(fifo.name, "shared", tile, fifo.shape, fifo.dtype, fifo.nbytes, depth,
                         (tile,) * depth, (lane,))
                )  # fmt: skip
                continue
            for end in fifo.endpoints:
                if end.kind == "shim" and fifo.name not in self.legs:
                    self._pair(end.tile, fifo.name, 0)
                if end.kind != "core":
                    continue
                tile = endpoint_tile(design, end)
                programmed = fifo.name in self.fed
                depth = fifo.depth_at(end) if programmed else self._end_depth(fifo, end)
                repeat = (fifo.repeat_count or 1) if end is fifo.producer else 1
                pair = self._pair(tile, fifo.name, depth * repeat)
                lane = Lane(fifo.name, 0, fifo.size, *pair)
                self.pool_of_end[fifo.name, end.label] = self._pool(
                    Pool(fifo.name, "core", tile, fifo.shape, fifo.dtype, fifo.nbytes, depth,
                         (tile,) * depth, (lane,))
                )  # fmt: skip

    # ---- channels

    def _ends(self):
        """Every DMA end, in the lowering's IR order: (fifo, endpoint, direction)."""
        for fifo in self.design.fifos:
            if fifo.name in self.shared:
                continue
            yield fifo, fifo.producer, MM2S
            for consumer in fifo.consumers:
                yield fifo, consumer, S2MM

    def _limit(self, endpoint: Endpoint) -> int:
        return self.device.limits(endpoint.kind).dma_channels

    def _channels(self) -> None:
        design = self.design
        taken: dict[tuple[Tile, str], set[int]] = defaultdict(set)
        index: dict[tuple[str, str, str], int] = {}  # (fifo, end label, direction) -> channel

        def fixed(fifo, end, direction, number):
            tile = endpoint_tile(design, end)
            taken[tile, direction].add(number)
            index[fifo.name, end.label, direction] = number

        def highest(tile, direction, limit) -> int:
            free = [i for i in range(limit) if i not in taken[tile, direction]]
            if free:
                return free[-1]
            return next(i for i in itertools.count(limit) if i not in taken[tile, direction])

        ends = list(self._ends())
        for fifo, end, direction in ends:  # pins first (`reservePinnedChannels`)
            if end.channel is not None:
                fixed(fifo, end, direction, end.channel)
        # a programmed pool's channels: aie.mem, shim_dma_allocation and the
        # runtime's memtile tasks, which the lowering does not see, so they
        # take the top of each range
        for link in self.programmed.values():
            source, destination = design.fifo(link.sources[0]), design.fifo(link.destinations[0])
            for fifo, end, direction in (
                (source, source.consumer("memtile", link.name), S2MM),
                (destination, destination.producer, MM2S),
                (source, source.producer, MM2S),
                *((destination, c, S2MM) for c in destination.consumers),
            ):
                if end.channel is None:
                    tile = endpoint_tile(design, end)
                    fixed(fifo, end, direction, highest(tile, direction, self._limit(end)))
        spilled = {
            self.pools[p].link for p in self.pool_of_link.values()
            if len(set(self.pools[p].tiles)) > 1
        }  # fmt: skip
        for cross in (True, False):  # `assignDMAChannelIndices`: spilled pools' ends first
            for fifo, end, direction in ends:
                if (fifo.name, end.label, direction) in index:
                    continue
                if (end.kind == "memtile" and end.name in spilled) != cross:
                    continue
                tile = endpoint_tile(design, end)
                limit = min(self._limit(end), ADJACENT_CHANNELS) if cross else self._limit(end)
                free = (i for i in range(limit) if i not in taken[tile, direction])
                number = next(free, None)
                if number is None:  # the lowering fails here; check reports it
                    number = next(
                        i
                        for i in itertools.count(self._limit(end))
                        if i not in taken[tile, direction]
                    )
                taken[tile, direction].add(number)
                index[fifo.name, end.label, direction] = number
        for fifo, end, direction in ends:
            self._channel(fifo, end, direction, index[fifo.name, end.label, direction], spilled)

    def _channel(self, fifo: ObjectFifo, end: Endpoint, direction: str, number: int, spilled):
        design = self.design
        tile = endpoint_tile(design, end)
        limit = self._limit(end)
        if end.kind == "memtile" and end.name in spilled:
            limit = min(limit, ADJACENT_CHANNELS)
        common = dict(
            tile=tile, kind=end.kind, direction=direction, index=number, fifo=fifo.name,
            end=end.label, limit=limit, pinned=end.channel is not None,
        )  # fmt: skip
        if end.kind == "shim":
            self.channels.append(Channel(pool=None, driver="runtime", **common))
            return
        if end.kind == "memtile" and end.name in self.programmed:
            pool = self.pool_of_link[end.name]
            self.channels.append(Channel(pool=pool, driver="pool", **common))
            return
        sends = direction == MM2S
        dims = fifo.dims_to_stream if sends else end.dims_from_stream
        repeat = (fifo.repeat_count or 1) if sends else 1
        if end.kind == "core":
            pool_index = self.pool_of_end[fifo.name, end.label]
            pool = self.pools[pool_index]
            chain = self._chain(pool.depth, [(0, 0, pool.size)], dims, repeat, 1, None)
            iterations = None
        else:
            link = design.link(end.name)
            pool_index = self.pool_of_link[link.name]
            pool = self.pools[pool_index]
            owner = pool.name == fifo.name and (
                link.kind != "forward" or link_pool_end(design, link)[1] is end
            )
            # the link's input side takes (and gives) `repeat` counts per object
            counts = link_repeat(design, link) if fifo.name == link.sources[0] else 1
            if link.kind == "forward":
                lanes = [(0, 0, pool.size)]  # both channels move whole pool objects
            elif owner:
                lanes = [(i, lane.offset, lane.length) for i, lane in enumerate(pool.lanes)]
            else:
                i = next(i for i, lane in enumerate(pool.lanes) if lane.fifo == fifo.name)
                lanes = [(i, pool.lanes[i].offset, pool.lanes[i].length)]
            iterations = fifo.iter_count
            chain = self._chain(pool.depth, lanes, dims, repeat, counts, iterations)
        self.channels.append(Channel(pool=pool_index, chain=chain, iterations=iterations, **common))

    @staticmethod
    def _chain(depth, lanes, dims, repeat, counts, iterations) -> tuple[Bd, ...]:
        """One BD per slot and lane, each `repeat` times, unless one BD on a
        one-slot pool with no lanes and no iteration bound repeats in hardware."""
        hardware = repeat > 1 and depth == 1 and len(lanes) == 1 and iterations is None
        times = 1 if hardware else repeat
        return tuple(
            Bd(slot, lane, offset, length, dims, counts, counts)
            for slot in range(depth)
            for _ in range(times)
            for lane, offset, length in lanes
        )

    def _streams(self) -> tuple[Stream, ...]:
        by_end = {(c.fifo, c.end, c.direction): i for i, c in enumerate(self.channels)}
        streams = []
        for fifo in self.design.fifos:
            if fifo.name in self.shared:
                continue
            source = by_end[fifo.name, fifo.producer.label, MM2S]
            sinks = tuple(by_end[fifo.name, c.label, S2MM] for c in fifo.consumers)
            streams.append(Stream(fifo.name, source, sinks))
        return tuple(streams)

    # ---- cores

    def _core(self, worker) -> Core:
        design = self.design
        ends = []
        for fifo in design.fifos:
            role = fifo.role_of("core", worker.name)
            if role is None:
                continue
            producer = role == "produce"
            if fifo.name in self.shared:
                pool = self.shared[fifo.name]
            else:
                end = fifo.producer if producer else fifo.consumer("core", worker.name)
                pool = self.pool_of_end[fifo.name, end.label]
            counts = (fifo.repeat_count or 1) if producer else 1
            ends.append(End(fifo.name, pool, producer, counts, fifo.name in self.fed))
        barriers = dict.fromkeys(
            op.barrier for op in walk(worker.body) if isinstance(op, (WaitBarrier, ReleaseBarrier))
        )
        locks = tuple((b, self._lock(worker.tile, f"barrier {b}", "barrier", 0)) for b in barriers)
        stack = self.device.core_stack_bytes if worker.stack_size is None else worker.stack_size
        body = _HeldAnalysis(worker).lowered()
        return Core(
            worker.name, worker.tile, stack, worker.buffers, tuple(ends), locks,
            worker.forever, body, self.rtp_of.get(worker.name),
        )  # fmt: skip

    # ---- the runtime sequence

    def runtime(self) -> Runtime:
        return _Sequence(self).lower()


class _HeldAnalysis:
    """What a worker holds before each op of its body, over every iteration:
    the body run as an abstract machine on intervals (fewest, most) per fifo,
    a loop iterated until its entry state no longer widens. Acquire is
    cumulative (holds the larger of what it held and what it asks for, as the
    lowering's runtime held counter does: `LowerObjectFifoAcquire`), Release
    hands back the oldest. A loop whose count may be zero (a Param) may also
    be skipped. A forever worker's body is such a loop entered holding nothing."""

    def __init__(self, worker):
        self.worker = worker
        self.before: dict[tuple[int, ...], dict[str, tuple[int, int]]] = {}

    def lowered(self) -> tuple[CoreOp, ...]:
        body = self.worker.body
        if self.worker.forever:
            self._loop(body, {}, (), may_skip=False)
        else:
            self._body(body, {}, ())
        return self._build(body, ())

    def _note(self, path, state) -> None:
        seen = self.before.get(path)
        self.before[path] = state if seen is None else _join(seen, state)

    def _body(self, body, state, path) -> dict:
        for i, op in enumerate(body):
            here = (*path, i)
            self._note(here, state)
            if isinstance(op, Acquire):
                lo, hi = state.get(op.fifo, (0, 0))
                state = {**state, op.fifo: (max(lo, op.n), max(hi, op.n))}
            elif isinstance(op, Release):
                lo, hi = state.get(op.fifo, (0, 0))
                state = {**state, op.fifo: (max(0, lo - op.n), max(0, hi - op.n))}
            elif isinstance(op, Loop) and op.count != 0:
                state = self._loop(op.body, state, here, may_skip=isinstance(op.count, Param))
        return state

    def _loop(self, body, state, path, may_skip) -> dict:
        head = dict(state)
        for _ in range(1000):  # intervals only widen, within 0..the largest acquire
            out = self._body(body, head, path)
            widened = _join(head, out)
            if widened == head:
                break
            head = widened
        return _join(state, out) if may_skip else out

    def _build(self, body, path, held_of=None) -> tuple[CoreOp, ...]:
        held_of = {} if held_of is None else held_of  # one Held per state, as ops share them
        ops = []
        for i, op in enumerate(body):
            here = (*path, i)
            state = self.before.get(here)
            held = held_of.get(id(state))
            if held is None:
                held = (
                    Held((), reached=False)
                    if state is None
                    else Held(tuple(sorted((f, lo, hi) for f, (lo, hi) in state.items())))
                )
                held_of[id(state)] = held
            inner = self._build(op.body, here, held_of) if isinstance(op, Loop) else ()
            ops.append(CoreOp(op, held, inner))
        return tuple(ops)


def _join(a: dict, b: dict) -> dict:
    if a is b or a == b:
        return a
    out = {}
    for fifo in {*a, *b}:
        (alo, ahi), (blo, bhi) = a.get(fifo, (0, 0)), b.get(fifo, (0, 0))
        out[fifo] = (min(alo, blo), max(ahi, bhi))
    return out


class _Sequence:
    """The runtime sequence as the host runs it, lowered as mlir-aie would:

    - a task's BD ids come from its tile's pool, lowest first; an await or a
      free returns them (`AIEAssignRuntimeSequenceBDIDs`);
    - a group's finish awaits its waited tasks, then frees every task of the
      group, awaited ones included, as mlir-aie's Runtime does
      (`RuntimeSequence.emit_transfer` records an await and a free for a
      waited task; `finish_task_group` orders waits before frees); groups
      left open finish at the end, in the order they began;
    - an await takes the channel's next task-completion token (it lowers to
      `npu.sync` on the channel: `AIEDMATasksToNPU`), so it is only sound in
      push order;
    - a channel queues `task_queue_depth` tasks; a push onto a full queue is
      lost (the status register's sticky `Task_Queue_Overflow`), and mlir-aie
      at the pin inserts no wait for room (a start lowers straight to
      `npu.push_queue`). So before such a push the sequence here awaits the
      channel's oldest task that issues a token, which proves it and every
      task before it done; with none to await the push may be lost, which
      `check` reports. The tasks of a finished group that has a waited task
      are taken as done (that task depends on them: a drain waits for the
      fills that feed it), a programmed pool's pushes included, which never
      issue a token; a group with no waited task proves nothing done.
    """

    def __init__(self, builder: _Builder):
        self.builder = builder
        self.design = builder.design
        self.device = builder.device
        channels = builder.channels
        self.shim_channel = {
            (c.fifo, c.direction): i for i, c in enumerate(channels) if c.kind == "shim"
        }
        self.pool_channel = {
            (self.builder.pools[c.pool].link, c.direction == S2MM): i
            for i, c in enumerate(channels)
            if c.driver == "pool"
        }
        self.ops: list = []
        self.tasks: dict[int, Task | Push] = {}
        self.queued: dict[int, list[int]] = defaultdict(list)  # channel -> outstanding tasks
        self.tokens: dict[int, list[int]] = defaultdict(list)  # channel -> unawaited tokens
        self.live_ids: dict[Tile, set[int]] = defaultdict(set)
        # each channel's tile's ids, found once (a statement's lookup by Tile
        # hashes its fields)
        self.channel_ids = [self.live_ids[c.tile] for c in channels]
        self.groups: dict[str, list[int]] = {}
        self.overflows: list[QueueOverflow] = []
        self.misorders: list[TokenMisorder] = []

    def lower(self) -> Runtime:
        rtps = self.builder.rtps
        for number, buffer in enumerate(rtps):  # the call's words, before anything runs
            self.ops += [WriteRtp(number, i, p, 0) for i, p in enumerate(buffer.params)]
        if rtps:
            self.ops.append(SetLocks(tuple(b.lock for b in rtps), 1, 0))
        for index, statement in enumerate(self.design.sequence):
            if isinstance(statement, (Fill, Drain)):
                self._task(index, statement)
            elif isinstance(statement, PoolTask):
                self._push(index, statement)
            elif isinstance(statement, Finish):
                self._finish(statement.group, index)
            elif isinstance(statement, SetBarrier):
                locks = tuple(
                    lock
                    for core in self.builder.cores
                    for barrier, lock in core.barrier_locks
                    if barrier == statement.barrier
                )
                self.ops.append(SetLocks(locks, statement.value, index))
            elif isinstance(statement, SetLock):
                pool = self.builder.pools[self.builder.pool_of_link[statement.link]]
                self.ops.append(
                    SetLocks((pool.slot_locks[statement.slot][0],), statement.value, index)
                )
        end = len(self.design.sequence)
        for group in list(self.groups):
            self._finish(group, end)
        tasks = tuple(t for t in self.tasks.values() if isinstance(t, Task))
        pushes = tuple(t for t in self.tasks.values() if isinstance(t, Push))
        return Runtime(tasks, pushes, tuple(self.ops), tuple(self.overflows), tuple(self.misorders))

    def _room(self, index: int, channel: int) -> int:
        """Make room on `channel`'s queue for one more task; the count queued
        with it."""
        queue = self.queued[channel]
        if len(queue) >= self.device.task_queue_depth:
            waited = [t for t in queue if t in self.tokens[channel]]
            if waited:
                oldest = waited[0]
                self._await(oldest, index, None)
                del queue[: queue.index(oldest) + 1]
            else:
                self.overflows.append(QueueOverflow(index, channel, len(queue) + 1))
        queue.append(index)
        return len(queue)

    def _await(self, task: int, at: int, group: str | None) -> None:
        channel = self.tasks[task].channel
        tokens = self.tokens[channel]
        taken = tokens[0]
        if taken != task:
            self.misorders.append(TokenMisorder(at, task, taken))
        tokens.remove(task)
        self.ops.append(Await(task, taken, at, group))
        self._release_ids(task)

    def _release_ids(self, task: int) -> None:
        item = self.tasks[task]
        if isinstance(item, Task):
            self.channel_ids[item.channel].discard(item.bd_id)
        else:
            self.channel_ids[item.channel].difference_update(item.bd_ids)

    def _task(self, index: int, statement: Fill | Drain) -> None:
        direction = MM2S if isinstance(statement, Fill) else S2MM
        channel = self.shim_channel[statement.fifo, direction]  # the design's fifo, checked
        tap = (statement.tap or TAP.linear(self.design.tensor(statement.tensor).size)).padded()
        queued = self._room(index, channel)
        ids = self.channel_ids[channel]
        bd_id = 0
        while bd_id in ids:  # the lowest free
            bd_id += 1
        ids.add(bd_id)
        self.tasks[index] = Task(index, statement, channel, tap, bd_id, queued, len(ids))
        if statement.wait:
            self.tokens[channel].append(index)
        self.groups.setdefault(statement.group, []).append(index)
        self.ops.append(Start(index))

    def _push(self, index: int, statement: PoolTask) -> None:
        channel = self.pool_channel[statement.link, statement.fill]
        queued = self._room(index, channel)
        here = self.builder.channels[channel]
        bank = self._bank(here)
        ids = self.channel_ids[channel]
        free = [i for i in reversed(bank) if i not in ids]
        count = len(statement.bds)
        bd_ids = (
            tuple(free[:count])
            if len(free) >= count
            else tuple(bank[-1] + 1 + i for i in range(count))
        )
        ids.update(bd_ids)
        self.tasks[index] = Push(index, statement, channel, bd_ids, queued)
        self.groups.setdefault(statement.group, []).append(index)
        self.ops.append(Start(index))

    def _bank(self, channel: Channel) -> list[int]:
        """The BD ids a memtile channel reaches (`isBdChannelAccessible`)."""
        half = self.device.memtile_bds // 2
        return list(range(half)) if channel.index % 2 == 0 else list(range(half, 2 * half))

    def _finish(self, group: str, at: int) -> None:
        members = self.groups.pop(group, [])
        waited = False
        for task in members:
            item = self.tasks[task]
            if isinstance(item, Task) and item.statement.wait:
                waited = True
                if task in self.tokens[item.channel]:
                    self._await(task, at, group)
        for task in members:
            item = self.tasks[task]
            queue = self.queued[item.channel]
            if waited and task in queue:
                queue.remove(task)
            self.ops.append(Free(task, at))
            self._release_ids(task)
