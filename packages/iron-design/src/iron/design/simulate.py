"""The functional simulator: a design run on numpy, deterministically.

`simulate(design, tensors, params)` lowers the design (`iron.design.lower`)
and builds its machine from the lowered form, so its pools, locks, channels
and BD chains are the ones `check` counted and `to_mlir` printed; it runs
the machine until nothing can move, and returns every runtime tensor's final
contents with the bytes each tensor and tile moved. The model:

Pools and locks. Every pool of the lowered configuration, with its slots on
their tiles and its locks at their initial values: a producer lock per lane
(free slots, times a producer's repeat count) and a consumer lock (full
slots). Slots and worker buffers start as garbage (NaN for bf16 and f32,
0x5A bytes otherwise), as uncleared device memory does. Acquiring n waits
until the lock holds n and takes them at once (AcquireGreaterEqual);
releasing adds. A lock driven above `max_lock_value` is a `LockError`.

Workers run their lowered body as coroutines. `Acquire(fifo, n)` is
cumulative: objects already held count, only the missing ones are waited for
(each worth the end's lock counts: a repeated producer's object is sent that
many times); held objects are in ring order, oldest first (`Obj(fifo, i)`).
`Release(fifo, n)` hands back the n oldest. A `Call` runs the kernel's numpy
model on writable views of the held objects (shaped as the fifo's object),
the worker's `LocalBuffer` arrays (kept across iterations), and ints for
scalars and parameters. `WaitBarrier` waits until the worker's lock of the
barrier holds its value (an acquire-equal, as mlir-aie lowers
`wait_for_value`); `ReleaseBarrier` adds to it. A core with a
runtime-parameter buffer (`lower(design, rtp=...)`) waits for its
buffer's lock to be 1, first (or, where it reads a word before its first
acquire, at the top of every iteration, adding 1 at its end as mlir-aie's
mm_activation_epilogue example does), and reads such a parameter from its
word where it uses it (uncleared memory where the sequence wrote none). A `forever` worker repeats
its body; one whose iteration took no lock can only repeat it, so it parks.

DMA channels run their lowered BD chains, round and round (or `iterations`
times): a BD takes its lane's lock on its side by its count, moves its
elements of its slot (through its dimensions, from its offset) and gives the
other lock. Shim channels run the runtime's tasks in push order, one BD
each, walking the task's TAP a piece at a time with numpy index arithmetic
(never a Python step per element, nor an index array of the whole task); a
programmed pool's channels run the slot BDs the runtime pushed.

Streams. A fifo's elements leave its producer's channel and reach every
consumer's channel in lockstep: they move only when every consumer has a BD
ready, as many as the smallest of them can take, so a broadcast waits for
its slowest consumer. Nothing is buffered between BDs.

The runtime sequence runs the lowered ops in order: a start queues a task or
push on its channel; an await waits for the channel's next completion token
(tokens come in push order, one per finished task that issues one); a set
sets locks; an RTP write puts the call's value of a parameter into a word
of a core's runtime-parameter buffer. Scheduling is round robin over the sequence, the streams and the
workers, each moving as far as it can, until nothing moves.

The run has finished when the sequence has run every op, every task and
push is complete, and every worker that runs once has returned. A `forever`
worker left waiting is at rest, not stuck: it waits for the next call. Else
it is a `DeadlockError` listing what waits forever first, then every other
blocked actor with the lock it waits on.

Before running, every task's TAP and every BD's dimensions are checked
against their buffer (`OutOfBoundsError`), against whole objects and the
shim's iteration count (`TransferError`), and every push against its queue
(`QueueError`); after, each OUT tensor must have been written exactly once
everywhere and each INOUT tensor at most once (`CoverageError`: the drains'
contiguous pieces kept as spans, counted per element only where a pattern
scatters or the spans break the rule).

Replays. The machine's course depends on the design and the parameters
that steer it (loop counts, task offsets), never on the data. A `Simulator`
lowers its design once; the first run with each set of steering values
records, in order, each move of elements (from a buffer of the machine to
others: runtime tensors, then pool slots, by number) and each kernel call
with its arguments, and a later run replays that record on new data:
slots and local buffers garbage again, kernel scalars from its parameters.
A record becomes a program when first replayed (`iron.design.replay`),
which hands a kernel model with a batch form (`iron.design.kernel_batch`)
its runs of calls at once.
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Mapping

import attrs
import numpy as np

from iron.core.spec import Direction
from iron.design.lower import (
    MM2S,
    Await,
    Bd,
    Core,
    CoreOp,
    Lowered,
    Push,
    SetLocks,
    Start,
    Task,
    WriteRtp,
    lower,
    transfer_unit,
)
from iron.design.model import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    ElementType,
    Fill,
    LocalBuffer,
    Loop,
    Obj,
    Param,
    Release,
    ReleaseBarrier,
    Tile,
    WaitBarrier,
    element_type,
    require_design,
    walk,
)
from iron.design.replay import CALL, MOVE, play, program

# ---- errors ------------------------------------------------------------------------------


class SimulationError(Exception):
    """A design that cannot run, or runs wrongly, in the simulator."""


class DeadlockError(SimulationError):
    """The run stopped with work left. `blocked` lists every blocked actor
    (as `Blocked` records), the message one line each."""

    def __init__(self, message: str, blocked: tuple[Blocked, ...]):
        super().__init__(message)
        self.blocked = blocked


class LockError(SimulationError):
    """A lock released above the most it can hold (`max_lock_value`)."""


class OutOfBoundsError(SimulationError):
    """An access pattern reaches outside its tensor or object."""


class CoverageError(SimulationError):
    """An output element written twice, or (OUT tensors) never written."""


class TransferError(SimulationError):
    """A transfer that is not a whole number of objects, a pattern the shim
    cannot repeat that often, or dimensions that do not cover the buffer
    descriptor they order."""


class QueueError(SimulationError):
    """A task pushed onto a channel whose queue may be full, with no earlier
    task on it that the sequence can wait for: on hardware it may be lost."""


class WorkerError(SimulationError):
    """A worker body that releases or passes objects it does not hold."""


class KernelError(WorkerError):
    """A kernel call whose model raised."""


@attrs.frozen
class Blocked:
    """One blocked actor of a deadlock: what it waits on and, for a lock, how
    many it needs against what the lock has. `idle` marks an actor at rest
    (a forever worker waiting for more, a channel waiting for room)."""

    actor: str
    waits: str
    fifo: str | None = None
    lock: str | None = None  # "producer" | "consumer"
    needs: int = 0
    has: int = 0
    idle: bool = False

    def __str__(self) -> str:
        return f"{self.actor}: {self.waits}{'; idle at the top of its body' if self.idle else ''}"


# ---- results -------------------------------------------------------------------------------


@attrs.frozen
class BytesMoved:
    """Bytes read and written. For a tensor: read by fills, written by drains.
    For a tile: read out of its memory by its sending channels, written into
    it by its receiving channels (a shim tile's memory is DDR)."""

    read: int = 0
    written: int = 0


@attrs.frozen
class Traffic:
    """Bytes moved per runtime tensor (by name) and per tile."""

    tensors: dict[str, BytesMoved]
    tiles: dict[Tile, BytesMoved]

    @property
    def ddr(self) -> BytesMoved:
        """All DDR traffic of the run."""
        return BytesMoved(
            sum(b.read for b in self.tensors.values()),
            sum(b.written for b in self.tensors.values()),
        )


@attrs.frozen
class Simulation:
    """The outcome of a run: the placed design, the final contents of every
    runtime tensor, and the traffic."""

    design: Design
    tensors: dict[str, np.ndarray]
    traffic: Traffic

    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensors[name]


# ---- the entry points --------------------------------------------------------------------


def simulate(design: Design, tensors: Mapping[str, np.ndarray], params=None) -> Simulation:
    """Run `design` on `tensors` (runtime tensor name -> array: every IN and
    INOUT tensor; OUT tensors may be left out, the simulator allocates them)
    with `params` (runtime parameter name -> int32). The caller's arrays are
    never written. To run one design many times, make a `Simulator` once.

    Raises `SimulationError` subclasses for designs that cannot run, and
    `ValueError` for tensors or parameters that do not fit the design.
    """
    require_design("simulate", design)
    return Simulator(design)._machine_run(tensors, params, record=False)[0]


class Simulator:
    """`design` lowered once, to run many times (`run`, as `simulate`).

    What the machine does, which lock it waits on, which BD or kernel call
    comes next, never depends on the data: only on the design and on the
    parameters that steer it (loop counts and task offsets). So the first
    run with each set of steering values runs the machine, with every check,
    and records each move of elements and each kernel call in the order the
    machine made them; a later run with those values replays the record on
    its own data (kernel scalars take its parameters), slots and buffers
    starting as garbage again. The last `KEPT` records are kept; a run
    whose task walks a pattern too long to hold whole (`Walk.WHOLE`) keeps
    none, since its record would. One run at a time: a simulator's pools are
    its own."""

    KEPT = 8

    def __init__(self, design: Design, *, lowered: Lowered | None = None):
        """`lowered`: `design` already lowered (a stream lowered against a
        configuration, `iron.design.lower.lower_stream`)."""
        require_design("Simulator", design)
        self.lowered = lowered if lowered is not None else lower(design)
        self.design = self.lowered.design  # placed
        self.steering = _steering_params(self.lowered)
        self._replays: collections.OrderedDict[tuple[int, ...], _Replay] = collections.OrderedDict()
        self._lock = threading.Lock()

    def run(self, tensors: Mapping[str, np.ndarray], params=None) -> Simulation:
        """`simulate(design, tensors, params)`, replayed where it can be."""
        with self._lock:
            values = _params(self.design, params)
            key = tuple(values[name] for name in self.steering)
            replay = self._replays.get(key)
            if replay is None:
                result, replay = self._machine_run(tensors, values, record=True)
                if replay is not None:
                    self._replays[key] = replay
                    if len(self._replays) > self.KEPT:
                        self._replays.popitem(last=False)
                return result
            self._replays.move_to_end(key)
            arrays = _arrays(self.design, tensors)
            replay.run(arrays, values)
            return Simulation(self.design, arrays, replay.traffic())

    def _machine_run(self, tensors, params, record: bool) -> tuple[Simulation, _Replay | None]:
        params = _params(self.design, params)
        tasks = _tasks(self.lowered, params)  # refuses a bad pattern before anything is allocated
        machine = _Machine(self.lowered, _arrays(self.design, tensors), params, tasks, record)
        machine.run()
        result = Simulation(self.design, machine.arrays, machine.traffic())
        return result, _Replay(machine) if machine.events is not None else None


def _steering_params(lowered: Lowered) -> tuple[str, ...]:
    """The parameters the machine's course depends on: loop counts and task
    offsets (a parameter only passed to kernels steers nothing); a count
    read from a runtime-parameter word is the parameter the sequence writes
    there."""
    design, config = lowered.design, lowered.configuration
    names = {s.offset_param for s in design.sequence if getattr(s, "offset_param", None)}
    written = _rtp_writes(lowered)
    for core in config.cores:
        words = config.rtps[core.rtp].params if core.rtp is not None else ()
        for op in walk(design.worker(core.worker).body):
            if isinstance(op, Loop) and isinstance(op.count, Param):
                name = op.count.name
                if name in words:
                    name = written.get((core.rtp, words.index(name)))
                if name is not None:
                    names.add(name)
    return tuple(sorted(names))


def _rtp_writes(lowered: Lowered) -> dict[tuple[int, int], str]:
    """(runtime-parameter buffer, word) -> the parameter the sequence writes
    there last."""
    return {
        (op.buffer, op.index): op.param for op in lowered.runtime.ops if isinstance(op, WriteRtp)
    }


def _arrays(design: Design, given: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    unknown = sorted(set(given) - {t.name for t in design.tensors})
    if unknown:
        raise ValueError(
            f"design {design.name} has no tensor {unknown[0]!r} "
            f"(tensors: {', '.join(t.name for t in design.tensors)})"
        )
    arrays = {}
    for tensor in design.tensors:
        dtype = element_type(tensor.dtype).numpy
        if tensor.name not in given:
            if tensor.direction is not Direction.OUT:
                raise ValueError(
                    f"design {design.name}: {tensor.direction.value} tensor {tensor.name} "
                    "is missing from the tensors given"
                )
            # every element must be written once (else a CoverageError): no need to clear
            arrays[tensor.name] = np.empty(tensor.shape, dtype)
            continue
        array = np.asarray(given[tensor.name])
        if array.shape != tensor.shape or array.dtype != dtype:
            raise ValueError(
                f"design {design.name}: tensor {tensor.name} is {tensor.shape} {tensor.dtype}, "
                f"got an array of {array.shape} {array.dtype}"
            )
        arrays[tensor.name] = array.copy()
    return arrays


def _params(design: Design, given) -> dict[str, int]:
    given = dict(given or {})
    unknown = sorted(set(given) - set(design.params))
    if unknown:
        raise ValueError(
            f"design {design.name} has no parameter {unknown[0]!r} "
            f"(params: {', '.join(design.params) or 'none'})"
        )
    for name in design.params:
        if name not in given:
            raise ValueError(f"design {design.name}: parameter {name!r} is not given")
        value = given[name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"design {design.name}: parameter {name} is {value!r}, not an int")
        if not -(2**31) <= value < 2**31:
            raise ValueError(
                f"design {design.name}: parameter {name} = {value} does not fit an int32 word"
            )
    return {k: int(v) for k, v in given.items()}


# ---- access patterns, a piece at a time ------------------------------------------------


class Walk:
    """The elements a TAP visits, in visit order, given a piece at a time:
    `indices(start, stop)` is the flat offsets of visits start..stop-1 (a
    slice when the pattern is a plain row-major scan). A walk of up to
    `WHOLE` visits is computed once; a longer one a piece at a time, so no
    pattern costs more memory than the pieces the streams move."""

    WHOLE = 1 << 22

    def __init__(self, tap: TAP, offset: int = 0):
        self.offset = tap.offset + offset
        dims = [(s, t) for s, t in zip(tap.sizes, tap.strides) if s > 1]
        self.sizes = [s for s, _ in dims]
        self.strides = [t for _, t in dims]
        self.count = math.prod(tap.sizes)
        inner, scan = 1, True
        for size, stride in reversed(dims):
            scan = scan and stride == inner
            inner *= size
        self.scan = scan
        self.spans = [math.prod(self.sizes[i + 1 :]) for i in range(len(self.sizes))]
        self.whole = None
        if not scan and self.count <= self.WHOLE:
            self.whole = self._compute(0, self.count)

    def indices(self, start: int, stop: int):
        if self.scan:
            return slice(self.offset + start, self.offset + stop)
        if self.whole is not None:
            return self.whole[start:stop]
        return self._compute(start, stop)

    def _compute(self, start: int, stop: int) -> np.ndarray:
        position = np.arange(start, stop, dtype=np.int64)
        index = np.full(stop - start, self.offset, dtype=np.int64)
        for size, stride, span in zip(self.sizes, self.strides, self.spans):
            index += (position // span % size) * stride
        return index

    def reach(self) -> tuple[int, int, int, int]:
        """(lowest, its visit, highest, its visit): the extreme elements
        visited, and when, without visiting them all."""
        low = high = self.offset
        low_at = high_at = 0
        for size, stride, span in zip(self.sizes, self.strides, self.spans):
            if stride < 0:
                low += (size - 1) * stride
                low_at += (size - 1) * span
            else:
                high += (size - 1) * stride
                high_at += (size - 1) * span
        return low, low_at, high, high_at


def _check_bounds(where: str, walk: Walk, extent: int, what: str) -> None:
    """Refuse a walk that leaves 0..extent-1, naming its first step out
    (found a piece at a time, only once its reach shows there is one)."""
    low, _, high, _ = walk.reach()
    if low >= 0 and high < extent:
        return
    piece = 1 << 20
    for start in range(0, walk.count, piece):
        index = walk.indices(start, min(start + piece, walk.count))
        if isinstance(index, slice):
            index = np.arange(index.start, index.stop)
        bad = (index < 0) | (index >= extent)
        if bad.any():
            step = int(np.argmax(bad))
            raise OutOfBoundsError(
                f"{where} reaches element {index[step]} at step {start + step} of {walk.count}; "
                f"{what} has elements 0..{extent - 1}"
            )


def _tasks(lowered: Lowered, params) -> dict[int, SimTask]:
    """Each runtime task's walk over its tensor, checked before the run."""
    design = lowered.design
    device = design.device
    for overflow in lowered.runtime.overflows:
        item = lowered.runtime.task(overflow.index)
        raise QueueError(
            f"design {design.name}: sequence[{overflow.index}] ({item.subject}) is task "
            f"{overflow.queued} on a channel that queues {device.task_queue_depth}, and none "
            "before it there issues a token the sequence could wait for; on hardware the push "
            "may be lost"
        )
    tasks = {}
    for task in lowered.runtime.tasks:
        statement = task.statement
        fills = isinstance(statement, Fill)
        fifo, tensor = design.fifo(statement.fifo), design.tensor(statement.tensor)
        if fifo.dims_to_stream if fills else fifo.consumer("shim").dims_from_stream:
            raise TransferError(
                f"design {design.name}: fifo {fifo.name} has dimensions at its runtime "
                "end; the task's TAP orders a shim transfer"
            )
        label = (
            f"sequence[{task.index}] fill of fifo {fifo.name} from {tensor.name}"
            if fills
            else f"sequence[{task.index}] drain of fifo {fifo.name} into {tensor.name}"
        )
        tap = statement.tap or TAP.linear(tensor.size)
        if task.tap.sizes[0] > device.shim_max_iterations:
            raise TransferError(
                f"design {design.name}: {label}: TAP {tap} repeats its BD {task.tap.sizes[0]} "
                f"times; a shim BD iterates at most {device.shim_max_iterations}"
            )
        offset = 0
        if statement.offset_param is not None:
            name = statement.offset_param
            offset = _runtime_offset(design, label, name, params[name], tensor)
            label += f" at {name}={offset}"
        walk = Walk(tap, offset)
        _check_bounds(
            f"design {design.name}: {label}: TAP {tap}", walk, tensor.size, f"tensor {tensor.name}"
        )
        unit = transfer_unit(lowered, task)
        if walk.count % unit:
            raise TransferError(
                f"design {design.name}: {label}: TAP {tap} moves {walk.count} elements, "
                f"not a whole number of {unit}-element objects "
                f"({walk.count // unit} and {walk.count % unit} left over)"
            )
        tasks[task.index] = SimTask(label, task, walk)
    return tasks


def _runtime_offset(design: Design, label: str, param: str, offset: int, tensor) -> int:
    """The parameter's value, which the shim adds to the BD's address: in
    whole 4-byte words, since mlir-aie's DMA-to-NPU lowering rounds a
    misaligned parameter down to the word, with only a compile warning."""
    nbytes = element_type(tensor.dtype).nbytes
    if offset * nbytes % 4:
        raise TransferError(
            f"design {design.name}: {label}: {param}={offset} elements is {offset * nbytes} B, "
            "not a whole number of 4-byte words"
        )
    return offset


# ---- locks and pools ---------------------------------------------------------------------


class Lock:
    """A counting semaphore: one lock of the configuration."""

    def __init__(self, label: str, fifo: str | None, kind: str, value: int):
        self.label, self.fifo, self.kind, self.value = label, fifo, kind, value

    def __str__(self) -> str:
        return self.label


def _garbage(shape: tuple[int, ...], kind: ElementType) -> np.ndarray:
    """Memory as a core or memtile finds it: not cleared. NaN for bf16 and
    f32, every byte 0x5A for the rest, so a design that reads what it has not
    written gets a result that cannot pass for right."""
    array = np.empty(shape, kind.numpy)
    _spoil(array, kind)
    return array


def _spoil(array: np.ndarray, kind: ElementType) -> None:
    """Fill `array` with `_garbage`'s values, again."""
    if kind.floating:
        array.fill(np.nan)
    else:
        array.reshape(-1).view(np.uint8).fill(0x5A)


def _fresh(buffer: LocalBuffer) -> np.ndarray:
    """A worker's local buffer as the core's image starts it."""
    kind = element_type(buffer.dtype)
    if buffer.initial_value is None:
        return _garbage(buffer.shape, kind)
    return np.full(buffer.shape, buffer.initial_value, kind.numpy)


class Pool:
    """A lowered pool's slots, with where it is (for messages) and each
    slot's place in the machine's list of buffers (`refs`)."""

    def __init__(self, where: str, pool, refs: list[np.ndarray]):
        self.where, self.depth, self.lowered = where, pool.depth, pool
        self.kind = element_type(pool.dtype)
        self.slots = _garbage((pool.depth, *pool.shape), self.kind)
        self.flat = self.slots.reshape(pool.depth, -1)
        self.refs = list(range(len(refs), len(refs) + pool.depth))
        refs.extend(self.flat)


# ---- channels and streams ------------------------------------------------------------------


READ, WRITTEN = 0, 1  # slots of a [read, written] byte count


class Channel:
    """A DMA channel, one BD at a time. A sending channel offers
    `available()` elements of its BD, a receiving one has `room()` for them;
    `span(k)` is where its next k elements are (a buffer of the machine, by
    number, and the index into it) and `advance(k)` moves past them."""

    def __init__(self, label: str, nbytes: int, traffic: list[int], sends: bool):
        self.label, self.nbytes, self.traffic, self.sends = label, nbytes, traffic, sends

    def count(self, elements: int, slot: int) -> None:
        self.traffic[slot] += elements * self.nbytes

    def holding(self) -> bool:
        """Whether a BD runs (looked at, not started: for reports)."""
        raise NotImplementedError


class ChainChannel(Channel):
    """A tile channel running its lowered BD chain. A BD with dimensions
    places each element where they say, as it comes: nothing else sees the
    slot before the BD gives its lock."""

    def __init__(self, machine: _Machine, label, nbytes, traffic, sends, channel, pool: Pool):
        super().__init__(label, nbytes, traffic, sends)
        self.machine, self.pool = machine, pool
        lanes = pool.lowered.lanes
        self.bds = []
        for bd in channel.chain:
            lane = lanes[bd.lane]
            take, give = (lane.consumer, lane.producer) if sends else (lane.producer, lane.consumer)
            index = machine.bd_index(label, bd, pool)
            ref = pool.refs[bd.slot]
            self.bds.append((bd, machine.locks[take], machine.locks[give], index, ref))
        self.limit = None if channel.iterations is None else channel.iterations * len(self.bds)
        self.done = 0  # BDs completed
        self.current = None  # (bd, take, give, index, ref) while a BD runs
        self.moved = 0

    def _next(self):
        if self.limit is not None and self.done == self.limit:
            return None
        return self.bds[self.done % len(self.bds)]

    def arm(self) -> bool:
        if self.current is not None:
            return True
        bd = self._next()
        if bd is None or bd[1].value < bd[0].acquire:
            return False
        bd[1].value -= bd[0].acquire
        self.current, self.moved = bd, 0
        return True

    def available(self) -> int:
        if self.current is None and not self.arm():
            return 0
        return self.current[0].length - self.moved

    room = available

    def span(self, k: int):
        _, _, _, index, ref = self.current
        if index.__class__ is slice:
            start = index.start + self.moved
            return ref, slice(start, start + k)
        return ref, index[self.moved : self.moved + k]

    def advance(self, k: int, slot: int) -> None:
        self.moved += k
        self.count(k, slot)
        bd, _, give, _, _ = self.current
        if self.moved < bd.length:
            return
        self.current = None
        self.done += 1
        self.machine.release(give, bd.release, self.label)

    def holding(self) -> bool:
        return self.current is not None

    def waiting(self) -> Lock | None:
        """The lock an idle channel with BDs left waits on."""
        if self.current is not None:
            return None
        bd = self._next()
        return None if bd is None else bd[1]

    def stuck(self) -> str | None:
        """What a channel holding a BD has done: a sending one from the
        moment it took its lock, a receiving one once data came."""
        if self.current is None or (self.moved == 0 and not self.sends):
            return None
        verb = "sent" if self.sends else "received"
        return f"{verb} {self.moved} of {self.current[0].length} elements of its BD"


class SimTask:
    """A fill or drain: one shim BD walking its TAP over its tensor."""

    def __init__(self, label: str, task: Task, walk: Walk):
        self.label, self.task, self.walk = label, task, walk
        self.statement = task.statement
        self.moved = 0
        self.complete = False


class ShimChannel(Channel):
    """A shim DMA channel running the runtime's tasks, in push order. A
    finished task that issues a token leaves it for an await to take."""

    def __init__(self, machine: _Machine, label, nbytes, traffic, sends):
        super().__init__(label, nbytes, traffic, sends)
        self.machine = machine
        self.queue: collections.deque[SimTask] = collections.deque()
        self.task: SimTask | None = None
        self.tokens: collections.deque[SimTask] = collections.deque()

    def arm(self) -> bool:
        if self.task is None and self.queue:
            self.task = self.queue.popleft()
        return self.task is not None

    def available(self) -> int:
        return self.task.walk.count - self.task.moved if self.arm() else 0

    room = available

    def span(self, k: int):
        task = self.task
        tensor = task.statement.tensor
        index = task.walk.indices(task.moved, task.moved + k)
        if task.walk.whole is None and not task.walk.scan:
            # a piece of a long pattern, computed for this move: a record would
            # hold the whole pattern's indices, so this run keeps none
            self.machine.events = None
        if not self.sends:
            self.machine.written(tensor, index)
        return self.machine.tensor_refs[tensor], index

    def advance(self, k: int, slot: int) -> None:
        task = self.task
        self.count(k, slot)
        self.machine.tensor_traffic[task.statement.tensor][slot] += k * self.nbytes
        task.moved += k
        if task.moved == task.walk.count:
            task.complete = True
            if task.statement.wait:
                self.tokens.append(task)
            self.task = None

    def holding(self) -> bool:
        return self.task is not None

    def stuck(self) -> str | None:
        if self.task is None:
            return None
        verb = "sent" if self.sends else "received"
        return f"{verb} {self.task.moved} of {self.task.walk.count} elements of its BD"


class PushChannel(Channel):
    """A memtile channel of a programmed pool: it runs the slot BDs the
    runtime pushed onto it, in order, under per-slot locks."""

    def __init__(self, machine: _Machine, label, nbytes, traffic, sends, pool: Pool):
        super().__init__(label, nbytes, traffic, sends)
        self.machine, self.pool = machine, pool
        self.steps: collections.deque = collections.deque()  # (label, SlotBd, push index)
        self.moved = 0
        self.running = False
        self.pushes: dict[int, int] = {}  # push index -> BDs left

    def push(self, label: str, push: Push) -> None:
        steps = [
            (label, bd, push.index)
            for _ in range(push.statement.repeat_count)
            for bd in push.statement.bds
        ]
        self.steps.extend(steps)
        self.pushes[push.index] = len(steps)

    def locks(self, slot: int) -> tuple[Lock, Lock]:
        """(the lock a BD on `slot` takes, the lock it gives)."""
        free, full = (self.machine.locks[i] for i in self.pool.lowered.slot_locks[slot])
        return (full, free) if self.sends else (free, full)

    def arm(self) -> bool:
        if self.running:
            return True
        if not self.steps:
            return False
        _, bd, _ = self.steps[0]
        take, _ = self.locks(bd.slot)
        if take.value < bd.acquire:
            return False
        take.value -= bd.acquire
        self.running, self.moved = True, 0
        return True

    def available(self) -> int:
        return self.pool.lowered.size - self.moved if self.arm() else 0

    room = available

    def span(self, k: int):
        return self.pool.refs[self.steps[0][1].slot], slice(self.moved, self.moved + k)

    def advance(self, k: int, slot: int) -> None:
        self.moved += k
        self.count(k, slot)
        if self.moved < self.pool.lowered.size:
            return
        label, bd, push = self.steps.popleft()
        self.running = False
        self.pushes[push] -= 1
        _, give = self.locks(bd.slot)
        self.machine.release(give, bd.release, f"{label}: its BD on slot {bd.slot}")

    def holding(self) -> bool:
        return self.running

    def stuck(self) -> str | None:
        if not self.running or self.moved == 0:
            return None
        verb = "sent" if self.sends else "received"
        return f"{verb} {self.moved} of {self.pool.lowered.size} elements of its BD"

    def blocked(self) -> Blocked | None:
        """What a channel with BDs left waits on."""
        if not self.steps or self.running:
            return None
        label, bd, _ = self.steps[0]
        take, _ = self.locks(bd.slot)
        return Blocked(
            f"{label} ({self.label})",
            f"its BD on slot {bd.slot} waits on {take} for {bd.acquire} (it has {take.value}); "
            f"{len(self.steps)} BDs left",
            take.fifo,
            take.kind,
            bd.acquire,
            take.value,
        )


class Stream:
    """A fifo's elements from its producer's channel to every consumer's
    channel, in lockstep."""

    def __init__(self, machine: _Machine, fifo: str, source: Channel, sinks: list[Channel]):
        self.machine, self.fifo, self.source, self.sinks = machine, fifo, source, sinks

    def step(self) -> bool:
        source, sinks = self.source, self.sinks
        buffers = self.machine.buffers
        moved = False
        while True:
            k = source.available()
            for sink in sinks:
                if not k:
                    break
                k = min(k, sink.room())
            if not k:
                return moved
            ref, index = source.span(k)
            chunk = buffers[ref][index]
            targets = [sink.span(k) for sink in sinks]
            for target, at in targets:
                buffers[target][at] = chunk
            if self.machine.events is not None:
                self.machine.events.append((MOVE, ref, index, targets))
            source.advance(k, READ)
            for sink in sinks:
                sink.advance(k, WRITTEN)
            moved = True


# ---- workers ---------------------------------------------------------------------------------


class Port:
    """A worker's side of a pool: the lock it takes, the one it gives, how
    many counts one object is worth, and its place in the ring."""

    def __init__(self, pool: Pool, take: Lock, give: Lock, counts: int):
        self.pool, self.take, self.give, self.counts = pool, take, give, counts
        self.next = 0

    def acquire(self, n: int) -> list[int]:
        self.take.value -= n * self.counts
        slots = [(self.next + i) % self.pool.depth for i in range(n)]
        self.next = (self.next + n) % self.pool.depth
        return slots


class WorkerRun:
    """A worker's lowered body as a coroutine: `step` runs it until it blocks."""

    def __init__(self, machine: _Machine, core: Core, ports: dict[str, Port]):
        self.machine, self.core, self.ports = machine, core, ports
        self.worker = machine.design.worker(core.worker)
        self.label = f"worker {core.worker} at {core.tile}"
        self.held = {fifo: collections.deque() for fifo in ports}
        self.buffers = {b.name: _fresh(b) for b in core.buffers}
        #: each local buffer's place in the machine's list of buffers (for a replay)
        self.buffer_refs = {}
        for name, array in self.buffers.items():
            self.buffer_refs[name] = len(machine.buffers)
            machine.buffers.append(array.reshape(-1))
        self.barriers = {b: machine.locks[lock] for b, lock in core.barrier_locks}
        #: the parameters it reads from its runtime-parameter buffer
        self.rtp = None if core.rtp is None else machine.lowered.configuration.rtps[core.rtp]
        if self.rtp is not None:
            self.barriers[self.rtp.symbol] = machine.locks[self.rtp.lock]
        self.calls = [op for op in _walk(core.body) if isinstance(op.op, Call)]
        self.iteration = 0
        self.took = False  # took a lock this iteration
        self.acted = False  # acquired, released or called this iteration
        self.finished = self.parked = False
        self.wait = None  # (lock, need, equal) while blocked
        self.coroutine = self._run()

    def step(self) -> bool:
        moved = False
        while not (self.finished or self.parked):
            if self.wait is not None and not self._ready(*self.wait):
                return moved
            self.wait = next(self.coroutine, None)
            moved = True
        return moved

    @staticmethod
    def _ready(lock: Lock, value: int, equal: bool) -> bool:
        """A lock holds at least `value` (exactly, for a barrier's acquire-equal)."""
        return lock.value == value if equal else lock.value >= value

    @property
    def at_rest(self) -> bool:
        """Done, or waiting for what another call brings: a forever worker."""
        return self.finished or self.parked or self.worker.forever

    @property
    def idle(self) -> bool:
        """At the top of a forever body holding nothing (or parked, or done)."""
        if self.finished:
            return True
        if any(self.held.values()):
            return False
        return self.parked or (self.worker.forever and not self.acted)

    def _run(self):
        rtp = self.rtp
        lock = None if rtp is None else self.machine.locks[rtp.lock]
        if rtp is not None and not rtp.each_iteration:  # the runtime has written its words
            while not self._ready(lock, 1, True):
                yield lock, 1, True
        while True:
            self.iteration += 1
            self.took = self.acted = False
            if rtp is not None and rtp.each_iteration:  # this call's words are written
                while not self._ready(lock, 1, True):
                    yield lock, 1, True
            yield from self._body(self.core.body)
            if rtp is not None and rtp.each_iteration:  # read: the next call sets it again
                self.machine.release(lock, 1, self._where)
            if not self.worker.forever:
                self.finished = True
                return
            if not self.took:
                self.parked = True
                return

    def _body(self, ops: tuple[CoreOp, ...]):
        for lowered in ops:
            op = lowered.op
            if isinstance(op, Acquire):
                held = self.held[op.fifo]
                need = op.n - len(held)
                if need > 0:
                    port = self.ports[op.fifo]
                    counts = need * port.counts
                    while port.take.value < counts:
                        yield port.take, counts, False
                    held.extend(port.acquire(need))
                    self.took = self.acted = True
            elif isinstance(op, Release):
                self._release(op)
            elif isinstance(op, Call):
                self._call(lowered)
            elif isinstance(op, Loop):
                count = op.count
                if isinstance(count, Param):
                    count = self._param(count.name)
                for _ in range(count):
                    yield from self._body(lowered.body)
            elif isinstance(op, WaitBarrier):
                lock = self.barriers[op.barrier]
                while not self._ready(lock, op.value, True):
                    yield lock, op.value, True
            elif isinstance(op, ReleaseBarrier):
                self.machine.release(self.barriers[op.barrier], op.value, self._where)

    def _param(self, name: str) -> int:
        """Parameter `name` as this worker reads it now: a word of its
        buffer, or the run's parameter."""
        if self.rtp is not None and name in self.rtp.params:
            return int(self.machine.rtp_words[self.core.rtp][self.rtp.params.index(name)])
        return self.machine.params[name]

    def _source(self, name: str) -> str | None:
        """The run's parameter whose value this worker reads as `name` now
        (None: an RTP word the sequence never wrote)."""
        if self.rtp is not None and name in self.rtp.params:
            return self.machine.rtp_sources.get((self.core.rtp, self.rtp.params.index(name)))
        return name

    def _where(self, iteration: int | None = None) -> str:
        iteration = self.iteration if iteration is None else iteration
        return (
            f"design {self.machine.design.name}: worker {self.core.worker}, iteration {iteration}"
        )

    def _release(self, op: Release) -> None:
        held = self.held[op.fifo]
        if op.n > len(held):
            raise WorkerError(
                f"{self._where()}: releases {op.n} objects of fifo {op.fifo} but holds {len(held)}"
            )
        for _ in range(op.n):
            held.popleft()
        port = self.ports[op.fifo]
        self.machine.release(port.give, op.n * port.counts, self._where)
        self.acted = True

    def _call(self, lowered: CoreOp) -> None:
        call = lowered.op
        model = call.kernel.model
        args = [self._argument(lowered, i, arg) for i, arg in enumerate(call.args)]
        try:
            model(*args)
        except Exception as error:
            raise self.kernel_error(lowered, self.iteration, error) from error
        events = self.machine.events
        if events is not None:
            params = tuple(
                (i, source)
                for i, a in enumerate(call.args)
                if isinstance(a, Param) and (source := self._source(a.name)) is not None
            )
            refs = tuple(self._ref(arg) for arg in call.args)
            events.append((CALL, model, args, params, self, lowered, self.iteration, refs))
        self.acted = True

    def _ref(self, arg):
        """Which buffer of the machine an argument is, by number (for a
        replay), None for a scalar."""
        if isinstance(arg, Obj):
            return self.ports[arg.fifo].pool.refs[self.held[arg.fifo][arg.index]]
        if isinstance(arg, Buf):
            return self.buffer_refs[arg.name]
        return None

    def kernel_error(self, lowered: CoreOp, iteration: int, error: Exception) -> KernelError:
        return KernelError(
            f"{self._call_text(lowered, iteration)}: the model {lowered.op.kernel.model!r} raised "
            f"{type(error).__name__}: {error}"
        )

    def _call_text(self, lowered: CoreOp, iteration: int | None = None) -> str:
        """Which call of the body, for error messages (the body's calls are
        numbered in program order, so equal calls still read apart)."""
        number = next(i for i, c in enumerate(self.calls, 1) if c is lowered)
        return f"{self._where(iteration)}: call {number} of {len(self.calls)} ({lowered.op.kernel.symbol})"

    def _argument(self, lowered: CoreOp, i: int, arg):
        if isinstance(arg, Obj):
            held = self.held[arg.fifo]
            if arg.index >= len(held):
                raise WorkerError(
                    f"{self._call_text(lowered)}: argument {i} is object {arg.index} of fifo "
                    f"{arg.fifo}, but the worker holds {len(held)}"
                )
            return self.ports[arg.fifo].pool.slots[held[arg.index]]
        if isinstance(arg, Buf):
            return self.buffers[arg.name]
        if isinstance(arg, Param):
            return self._param(arg.name)
        return int(arg)

    def blocked(self) -> Blocked:
        holds = ", ".join(f"{len(h)} of {f}" for f, h in self.held.items() if h) or "nothing"
        actor = f"{self.label}, iteration {self.iteration}"
        if self.wait is None:
            return Blocked(actor, f"repeats an iteration that takes no lock; holds {holds}")
        lock, value, equal = self.wait
        if equal:
            barrier = next(b for b, held in self.barriers.items() if held is lock)
            return Blocked(
                actor,
                f"waits for barrier {barrier} to be {value} (it is {lock.value}); holds {holds}",
                idle=self.idle,
            )
        depth = self.ports[lock.fifo].pool.depth if lock.fifo in self.ports else "?"
        return Blocked(
            actor,
            f"waits on {lock} for {value} (it has {lock.value}; depth {depth}); holds {holds}",
            lock.fifo,
            lock.kind,
            value,
            lock.value,
            self.idle,
        )


def _walk(body: tuple[CoreOp, ...]):
    for op in body:
        yield op
        yield from _walk(op.body)


# ---- the runtime sequence ------------------------------------------------------------------


class SequenceRun:
    """The lowered runtime ops, in order: starts, awaits, sets."""

    def __init__(self, machine: _Machine):
        self.machine = machine
        self.ops = machine.lowered.runtime.ops
        self.pc = 0

    @property
    def done(self) -> bool:
        return self.pc == len(self.ops)

    def step(self) -> bool:
        machine, moved = self.machine, False
        while not self.done:
            op = self.ops[self.pc]
            if isinstance(op, Await):
                channel = machine.channel_of[op.task]
                if not channel.tokens:
                    return moved
                channel.tokens.popleft()
            elif isinstance(op, Start):
                machine.start(op.task)
            elif isinstance(op, SetLocks):
                for lock in op.locks:
                    machine.locks[lock].value = op.value
            elif isinstance(op, WriteRtp):
                machine.rtp_words[op.buffer][op.index] = machine.params[op.param]
                machine.rtp_sources[op.buffer, op.index] = op.param
            self.pc += 1
            moved = True
        return moved

    def blocked(self) -> Blocked:
        op = self.ops[self.pc]
        sequence = self.machine.design.sequence
        if op.group is None:
            place = f"sequence[{op.at}] (room in its channel's queue)"
        elif op.at == len(sequence):
            place = f"the end of the sequence (group {op.group})"
        else:
            place = f"sequence[{op.at}] (finish of group {op.group})"
        task = self.machine.tasks[op.token_of]
        return Blocked(
            "runtime sequence",
            f"waits at {place} for {task.label} ({task.moved} of {task.walk.count} elements moved)",
        )


# ---- building and running the machine ----------------------------------------------------------


class _Machine:
    def __init__(self, lowered: Lowered, arrays: dict[str, np.ndarray], params, tasks, record):
        self.lowered, self.design = lowered, lowered.design
        self.arrays, self.params, self.tasks = arrays, params, tasks
        config = lowered.configuration
        #: what the streams move between, by number: the runtime tensors
        #: (flat), then every slot of every pool
        self.buffers = [arrays[t.name].reshape(-1) for t in self.design.tensors]
        self.tensor_refs = {t.name: i for i, t in enumerate(self.design.tensors)}
        #: the moves and kernel calls of the run, in order (when recording)
        self.events: list | None = [] if record else None
        self.tensor_traffic = {t.name: [0, 0] for t in self.design.tensors}
        self.writes = {
            t.name: _Writes(t.size) for t in self.design.tensors if t.direction is not Direction.IN
        }
        self.tile_traffic: dict[Tile, list[int]] = {}
        self.most = self.design.device.max_lock_value
        self.pools = [Pool(self._where(p), p, self.buffers) for p in config.pools]
        labels = self._lock_labels()
        self.locks = [self._lock(lock, labels.get(i)) for i, lock in enumerate(config.locks)]
        self.channels = [self._channel(c) for c in config.channels]
        self.streams = [
            Stream(self, s.fifo, self.channels[s.source], [self.channels[i] for i in s.sinks])
            for s in config.streams
        ]
        #: the cores' runtime-parameter buffers, uncleared until the sequence writes them
        self.rtp_words = [np.full(len(b.params), 0x5A5A5A5A, np.int32) for b in config.rtps]
        self.rtp_sources: dict[tuple[int, int], str] = {}
        self.workers = [WorkerRun(self, core, self._ports(core)) for core in config.cores]
        self.channel_of = {
            t.index: self.channels[t.channel]
            for t in (*lowered.runtime.tasks, *lowered.runtime.pushes)
        }
        self.pushes = {p.index: p for p in lowered.runtime.pushes}
        self.sequence = SequenceRun(self)

    # ---- building

    def _where(self, pool) -> str:
        """Where a pool is, as messages name it."""
        if pool.kind in ("core", "shared"):
            owner = next(c.worker for c in self.lowered.configuration.cores if c.tile == pool.tile)
            return f"core {owner} {pool.tile}"
        return f"memtile {pool.link} {pool.tile}"

    def _lock_labels(self) -> dict[int, tuple[str, str]]:
        """(fifo, where) of each pool lock, as messages name it."""
        labels = {}
        for pool in self.pools:
            for lane in pool.lowered.lanes:
                for index in (lane.producer, lane.consumer):
                    labels[index] = (lane.fifo, pool.where)
            for pair in pool.lowered.slot_locks:
                for index in pair:
                    labels[index] = (pool.lowered.name, pool.where)
        return labels

    @staticmethod
    def _lock(lock, label) -> Lock:
        if lock.role == "barrier":
            return Lock(f"{lock.owner} at {lock.tile}", None, "barrier", lock.init)
        fifo, where = label or (lock.owner, f"shim {lock.tile}")
        kind = lock.role.split()[0]
        return Lock(f"the {lock.role} lock of fifo {fifo} at {where}", fifo, kind, lock.init)

    def _channel(self, channel) -> Channel:
        nbytes = element_type(self.design.fifo(channel.fifo).dtype).nbytes
        traffic = self.tile_traffic.setdefault(channel.tile, [0, 0])
        sends = channel.direction == MM2S
        if channel.driver == "runtime":
            label = f"shim {channel.tile} {channel.direction} of fifo {channel.fifo}"
            return ShimChannel(self, label, nbytes, traffic, sends)
        pool = self.pools[channel.pool]
        label = f"{pool.where} {channel.direction} of fifo {channel.fifo}"
        if channel.driver == "pool":
            return PushChannel(self, label, nbytes, traffic, sends, pool)
        return ChainChannel(self, label, nbytes, traffic, sends, channel, pool)

    def bd_index(self, label: str, bd: Bd, pool: Pool):
        """The elements of a slot one BD moves, in stream order."""
        if not bd.dims:
            return slice(bd.offset, bd.offset + bd.length)
        tap = TAP.of_dims(bd.dims, bd.offset)
        where = f"design {self.design.name}: {label}"
        if tap.count != bd.length:
            raise TransferError(
                f"{where}: dimensions {list(bd.dims)} move {tap.count} elements, but each BD "
                f"moves {bd.length}"
            )
        walk = Walk(tap)
        _check_bounds(
            f"{where}: dimensions {list(bd.dims)}", walk, pool.flat.shape[1], "the object"
        )
        return walk.indices(0, walk.count)

    def _ports(self, core: Core) -> dict[str, Port]:
        ports = {}
        for end in core.ends:
            pool = self.pools[end.pool]
            lane = pool.lowered.lanes[0]
            producer, consumer = self.locks[lane.producer], self.locks[lane.consumer]
            take, give = (producer, consumer) if end.producer else (consumer, producer)
            ports[end.fifo] = Port(pool, take, give, end.counts)
        return ports

    # ---- running

    def release(self, lock: Lock, value: int, who) -> None:
        """Add `value` to `lock`; `who` (a text, or a function giving it)
        releases it."""
        lock.value += value
        if lock.value > self.most:
            who = who if isinstance(who, str) else who()
            raise LockError(
                f"{who} raises {lock} to {lock.value}, above the device's max lock value "
                f"{self.most}"
            )

    def start(self, index: int) -> None:
        channel = self.channel_of[index]
        if isinstance(channel, PushChannel):
            push = self.pushes[index]
            way = "fill" if push.statement.fill else "drain"
            channel.push(f"sequence[{index}] {way} of link {push.statement.link}", push)
        else:
            channel.queue.append(self.tasks[index])

    def written(self, tensor: str, index) -> None:
        writes = self.writes.get(tensor)
        if writes is not None:
            writes.add(index)

    def run(self) -> None:
        actors = [self.sequence, *self.streams, *self.workers]
        while any([actor.step() for actor in actors]):
            pass
        self._check_finished()
        self._check_coverage()

    def traffic(self) -> Traffic:
        return Traffic(
            {name: BytesMoved(*counts) for name, counts in self.tensor_traffic.items()},
            {tile: BytesMoved(*counts) for tile, counts in sorted(self.tile_traffic.items())},
        )

    # ---- after the run

    def _check_finished(self) -> None:
        """Raise `DeadlockError` if the sequence, a task or push, or a worker
        that runs once waits forever. The report lists what is wrong (the
        causes) and, after them, the actors at rest that a cause holds up
        (idle workers, channels waiting for room); a forever worker left
        waiting once everything else is done is at rest, not stuck."""
        causes, at_rest, forever = [], [], False
        if not self.sequence.done:
            causes.append(self.sequence.blocked())
            forever = True
        for worker in self.workers:
            if worker.wait is not None or not worker.idle:
                (at_rest if worker.idle else causes).append(worker.blocked())
                forever = forever or not worker.at_rest
        for stream in self.streams:
            for channel in (stream.source, *stream.sinks):
                stuck = self._stuck(channel, stream)
                if stuck is not None:
                    causes.append(stuck)
                    forever = forever or isinstance(channel, (ShimChannel, PushChannel))
                elif (room := _waiting_for_room(channel)) is not None:
                    at_rest.append(room)
        for pool in self.pools:
            for i, pair in enumerate(pool.lowered.slot_locks):
                full = self.locks[pair[1]]
                if full.value:
                    causes.append(
                        Blocked(
                            f"slot {i} of {pool.where}",
                            f"filled, {full.value} uses never sent",
                            full.fifo,
                            "consumer",
                        )
                    )
            for lane in pool.lowered.lanes:
                if lane.consumer is None:
                    continue
                full = self.locks[lane.consumer]
                if full.value:
                    causes.append(
                        Blocked(
                            f"fifo {lane.fifo} at {pool.where}",
                            f"{_objects(full.value)} full in the pool, never taken",
                            lane.fifo,
                            "consumer",
                        )
                    )
        if forever:
            blocked = (*causes, *at_rest)
            lines = "\n".join(f"  {b}" for b in blocked)
            raise DeadlockError(f"design {self.design.name} cannot finish:\n{lines}", blocked)

    def _stuck(self, channel: Channel, stream: Stream) -> Blocked | None:
        """A channel part-way through a BD, a shim channel holding a task, a
        pool channel with pushed BDs left."""
        label = channel.label
        if isinstance(channel, ShimChannel):
            if channel.task is None and not channel.queue:
                return None
            task = channel.task or channel.queue[0]
            label = f"{task.label} ({channel.label})"
            done = (
                channel.stuck()
                or f"{'sent' if channel.sends else 'received'} 0 of {task.walk.count} elements of its BD"
            )
        elif isinstance(channel, PushChannel):
            done = channel.stuck()
            if done is None:
                return channel.blocked()
        else:
            done = channel.stuck()
        if done is None:
            return None
        if channel.sends:
            idle = [s.label for s in stream.sinks if not s.holding()]
            done += f"; {', '.join(idle) or 'no consumer'} takes none"
        return Blocked(label, done)

    def _check_coverage(self) -> None:
        for tensor in self.design.tensors:
            if tensor.direction is Direction.IN:
                continue
            counts = self.writes[tensor.name].counts(tensor.direction is Direction.OUT)
            if counts is None:
                continue
            twice = np.flatnonzero(counts > 1)
            never = np.flatnonzero(counts == 0) if tensor.direction is Direction.OUT else []
            if len(twice) or len(never):
                rule = (
                    "is written exactly once everywhere"
                    if tensor.direction is Direction.OUT
                    else "is written at most once per element"
                )
                found = []
                if len(never):
                    found.append(
                        f"{len(never)} elements never written (first {_element(tensor, never[0])})"
                    )
                if len(twice):
                    first = twice[0]
                    found.append(
                        f"{len(twice)} written more than once (first {_element(tensor, first)}, "
                        f"{counts[first]} times)"
                    )
                raise CoverageError(
                    f"design {self.design.name}: {tensor.direction.value} tensor {tensor.name} "
                    f"of {tensor.size} elements {rule}; found {' and '.join(found)}"
                )


# ---- replaying a recorded run ------------------------------------------------------------


class _Replay:
    """A recorded run, to replay on new data: its moves of elements and its
    kernel calls as a program (`iron.design.replay`), over the machine's own
    pools and local buffers."""

    def __init__(self, machine: _Machine):
        self.names = [t.name for t in machine.design.tensors]
        # made into a program when first replayed: many records never are (a
        # KV cache's write at each position)
        self.events: list | None = machine.events
        self.program: list | None = None
        # a record keeps no run's tensors (its calls' workers lead back to the machine)
        self.buffers = machine.buffers
        self.buffers[: len(self.names)] = [None] * len(self.names)
        machine.arrays = None
        self.pools = [(pool.slots, pool.kind) for pool in machine.pools]
        self.locals = [
            (worker.buffers[b.name], b) for worker in machine.workers for b in worker.core.buffers
        ]
        self.moved = machine.traffic()

    def traffic(self) -> Traffic:
        return Traffic(dict(self.moved.tensors), dict(self.moved.tiles))

    def run(self, arrays: dict[str, np.ndarray], params: dict[str, int]) -> None:
        for slots, kind in self.pools:
            _spoil(slots, kind)
        for array, buffer in self.locals:
            if buffer.initial_value is None:
                _spoil(array, element_type(buffer.dtype))
            else:
                np.copyto(array, buffer.initial_value, casting="unsafe")
        buffers = self.buffers
        if self.program is None:
            self.program, self.events = program(self.events, buffers, len(self.names)), None
        buffers[: len(self.names)] = [arrays[name].reshape(-1) for name in self.names]
        try:
            play(self.program, buffers, params)
        finally:
            buffers[: len(self.names)] = [None] * len(self.names)


class _Writes:
    """Where the drains wrote one tensor: the contiguous pieces as spans,
    counted element by element only where a pattern scatters, or when the
    spans break the rule (to say where)."""

    def __init__(self, size: int):
        self.size = size
        self.spans: list[tuple[int, int]] = []
        self.scattered: np.ndarray | None = None

    def add(self, index) -> None:
        if index.__class__ is slice:
            self.spans.append((index.start, index.stop))
            return
        if self.scattered is None:
            self.scattered = np.zeros(self.size, np.int32)
        np.add.at(self.scattered, index, 1)

    def counts(self, exactly_once: bool) -> np.ndarray | None:
        """Writes per element; None when the spans alone show every element
        written at most once (`exactly_once`: exactly once)."""
        if self.scattered is None:
            end, broken = 0, False
            for start, stop in sorted(self.spans):
                if start < end or (exactly_once and start > end):  # written twice, or a gap
                    broken = True
                    break
                end = stop
            if not broken and (not exactly_once or end == self.size):
                return None
        counts = np.zeros(self.size, np.int64)
        if self.scattered is not None:
            counts += self.scattered
        if self.spans:
            edges = np.zeros(self.size + 1, np.int64)
            starts, stops = np.array(self.spans).T
            np.add.at(edges, starts, 1)
            np.add.at(edges, stops, -1)
            counts += np.cumsum(edges[:-1])
        return counts


def _element(tensor, flat: int) -> str:
    position = ", ".join(map(str, np.unravel_index(flat, tensor.shape)))
    return f"{tensor.name}[{position}]"


def _objects(n: int) -> str:
    return f"{n} object{'s' if n != 1 else ''}"


def _waiting_for_room(channel: Channel) -> Blocked | None:
    """A receiving channel whose pool is full."""
    if not isinstance(channel, ChainChannel) or channel.sends:
        return None
    lock = channel.waiting()
    if lock is None or lock.value >= 1:
        return None
    return Blocked(
        channel.label,
        f"waits on {lock} for 1 (it has {lock.value}): the pool is full",
        lock.fifo,
        lock.kind,
        1,
        lock.value,
    )
