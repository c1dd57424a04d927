"""The functional simulator: a design run on numpy, deterministically.

`simulate(design, tensors, params)` places the design, builds the machine
mlir-aie's ObjectFifo lowering (AIEObjectFifoStatefulTransform) would
build, runs it until nothing can move, and returns every runtime tensor's
final contents with the bytes each tensor and tile moved. The model:

Buffer pools. A fifo end on a core is a pool of `depth` slots on the
worker's tile (that end's depth). A memtile link owns one pool on its tile
holding the larger objects (a join's destination, a split's or forward's
source) in the depth of that fifo's memtile end; in a split or join each
small fifo owns its slice of every slot, with its own pair of locks (the
lowering's `joinDistribFactor` lock pairs). A fifo between cardinal
neighbour cores with one consumer, no dimensions and no repeat is one pool
that both workers share, and no DMA moves it (`requiresDMAs`,
`isLegalMemAffinity`). Shim ends hold no pool: the runtime's tensors are
the memory. Pools and worker buffers start as garbage (NaN for
bf16 and f32, 0x5A bytes otherwise), as uncleared device memory does.

Locks. Each pool part has a producer lock (free slots, starts at depth) and
a consumer lock (full slots, starts at 0): acquiring n waits until the lock
holds n and takes them at once (AcquireGreaterEqual); releasing adds.

Workers run their body as coroutines. `Acquire(fifo, n)` is cumulative:
objects already held count, only the missing ones are waited for; held
objects are in ring order, oldest first (`Obj(fifo, i)`). `Release(fifo,
n)` hands back the n oldest. A `Call` runs the kernel's numpy model on
writable views of the held objects (shaped as the fifo's object), the
worker's `LocalBuffer` arrays (kept across iterations), and ints for
scalars and parameters. `WaitBarrier` waits until the runtime has set the
barrier to its value (an acquire-equal, as mlir-aie lowers it). A `forever` worker repeats its body; one
whose iteration took no lock can only repeat it, so it parks.

DMA channels walk their pool's slots in ring order, one buffer descriptor
(BD) per object, or per slice on the large side of a split or join. A
sending (MM2S) BD takes the consumer lock, reads the slot in
`dims_to_stream` order, sends it `repeat_count` times and gives the
producer lock back; a receiving (S2MM) BD takes the producer lock, places
the stream's elements through the consumer's `dims_from_stream` and gives
the consumer lock. A memtile channel of a fifo with `iter_count` stops
after that many passes over its chain of BDs (mlir-aie's BD-chain task
count); other channels cycle forever. Dimensions address from the BD's
offset (a slice's offset in a split or join).

A programmed pool (`Link.programmed`) has a lock pair per slot, both
starting at 0, and its two memtile channels run only what the runtime
pushes: each `PoolTask` queues its chain of slot BDs `repeat_count` times
on its channel, and each BD acquires its slot's lock by its `acquire`
value, moves the slot whole and releases the other lock by its `release`
value (a lock driven above `max_lock_value` is a `LockError`). `SetLock`
sets a slot's producer lock.

Streams. A fifo's elements leave its producer's channel and reach every
consumer's channel in lockstep: they move only when every consumer has a
BD ready, as many as the smallest of them can take, so a broadcast waits
for its slowest consumer. Nothing is buffered between BDs.

The runtime sequence issues `Fill` and `Drain` tasks onto the shim channel
of their fifo, which runs them in order, one BD each: a fill sends the
tensor's elements in its TAP's visit order (gathered with numpy index
arithmetic); a drain scatters what it receives through its TAP. `Finish`
waits for the group's waited tasks, then frees the group; groups left open
finish at the end, in the order they began. `SetBarrier` sets a barrier.

Scheduling is round robin over the sequence, the streams and the workers,
each moving as far as it can, until nothing moves. The run has finished
when the sequence is done, every task complete, no channel holds part of a
transfer, no object waits in a pool, and every worker is done or idle (a
`forever` worker at the top of its body, holding nothing). Anything else
is a `DeadlockError` listing every blocked actor with the lock it waits on.

Before running, every task's TAP and every BD's dimensions are checked
against their buffer (`OutOfBoundsError`) and against whole objects
(`TransferError`); after, each OUT tensor must have been written exactly
once everywhere and each INOUT tensor at most once (`CoverageError`).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

import attrs
import numpy as np

from iron.core.spec import Direction
from iron.design.model import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    ElementType,
    Fill,
    Finish,
    Link,
    Loop,
    Obj,
    ObjectFifo,
    Param,
    PoolTask,
    Release,
    SetBarrier,
    SetLock,
    Tile,
    WaitBarrier,
    Worker,
    element_type,
    link_offsets,
    require_design,
    walk,
)
from iron.design.place import place
from iron.design.usage import shared_memory_tile

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
    """A transfer that is not a whole number of objects, or dimensions that
    do not cover the buffer descriptor they order."""


class WorkerError(SimulationError):
    """A worker body that releases or passes objects it does not hold."""


class KernelError(WorkerError):
    """A kernel call with the wrong number of arguments, or whose model raised."""


@attrs.frozen
class Blocked:
    """One blocked actor of a deadlock: what it waits on and, for a lock, how
    many it needs against what the lock has. `idle` marks an actor that
    would be at rest if the others had finished (a forever worker waiting
    at the top of its body with nothing held)."""

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


# ---- the entry point --------------------------------------------------------------------


def simulate(design: Design, tensors: Mapping[str, np.ndarray], params=None) -> Simulation:
    """Run `design` on `tensors` (runtime tensor name -> array: every IN and
    INOUT tensor; OUT tensors may be left out, the simulator allocates them)
    with `params` (runtime parameter name -> int32). The caller's arrays are
    never written.

    Raises `SimulationError` subclasses for designs that cannot run, and
    `ValueError` for tensors or parameters that do not fit the design.
    """
    require_design("simulate", design)
    machine = _Machine(place(design), _arrays(design, tensors), _params(design, params))
    machine.run()
    return Simulation(machine.design, machine.arrays, machine.traffic())


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
            arrays[tensor.name] = np.zeros(tensor.shape, dtype)
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


# ---- locks, pools, ports ---------------------------------------------------------------


class Lock:
    """A counting semaphore guarding one side of a pool part."""

    def __init__(self, fifo: str, kind: str, where: str, value: int):
        self.fifo, self.kind, self.where, self.value = fifo, kind, where, value

    def __str__(self) -> str:
        return f"the {self.kind} lock of fifo {self.fifo} at {self.where}"


def _garbage(shape: tuple[int, ...], kind: ElementType) -> np.ndarray:
    """Memory as a core or memtile finds it: not cleared. NaN for bf16 and
    f32, every byte 0x5A for the rest, so a design that reads what it has not
    written gets a result that cannot pass for right."""
    if kind.floating:
        return np.full(shape, np.nan, kind.numpy)
    raw = np.full((*shape, kind.numpy.itemsize), 0x5A, np.uint8)
    return raw.view(kind.numpy).reshape(shape)


class Pool:
    """`depth` slots of one object shape on one tile, cut into parts."""

    def __init__(self, where: str, tile: Tile, depth: int, fifo: ObjectFifo, parts):
        self.where, self.tile, self.depth = where, tile, depth
        self.slots = _garbage((depth, *fifo.shape), fifo.element)
        self.flat = self.slots.reshape(depth, -1)
        self.parts = [Part(self, *part) for part in parts]
        self.slot_locks: list[tuple[Lock, Lock]] = []  # a programmed pool's, per slot


class Part:
    """The slice [offset, offset + size) of every slot of a pool, with its
    producer lock (free slots) and consumer lock (full slots)."""

    def __init__(self, pool: Pool, fifo: str, offset: int, size: int):
        self.pool, self.fifo, self.offset, self.size = pool, fifo, offset, size
        self.free = Lock(fifo, "producer", pool.where, pool.depth)
        self.full = Lock(fifo, "consumer", pool.where, 0)


class Port:
    """One side of a part: the producer side takes free slots and hands them
    back full, the consumer side the reverse; both walk the ring in order."""

    def __init__(self, part: Part, producer: bool):
        self.pool = part.pool
        self.take, self.give = (part.free, part.full) if producer else (part.full, part.free)
        self.next = 0

    def acquire(self, n: int) -> list[int]:
        self.take.value -= n
        slots = [(self.next + i) % self.pool.depth for i in range(n)]
        self.next = (self.next + n) % self.pool.depth
        return slots


# ---- channels and streams ------------------------------------------------------------------


READ, WRITTEN = 0, 1  # slots of a [read, written] byte count


class Channel:
    """A DMA channel: a chain of BDs, one transfer at a time. A sending
    channel exposes `data` (what its BD sends) and `sent`; a receiving one
    `buffer` (where its BD lands) and `got`."""

    def __init__(self, label: str, nbytes: int, traffic: list[int]):
        self.label, self.nbytes, self.traffic = label, nbytes, traffic
        self.data = self.buffer = None
        self.sent = self.got = 0

    def count(self, elements: int, slot: int) -> None:
        self.traffic[slot] += elements * self.nbytes


class PoolChannel(Channel):
    """A tile DMA channel on a pool: `chain` is its BDs, (port, element index
    within a slot) each; `limit` bounds how many run (iter_count)."""

    def __init__(self, label, nbytes, traffic, chain, sends, repeat, limit):
        super().__init__(label, nbytes, traffic)
        self.chain, self.sends, self.repeat, self.limit = chain, sends, repeat, limit
        self.done = 0  # BDs completed
        self.port = self.slot = None
        self.left = 0  # sends left of the current BD

    def arm(self) -> bool:
        """Start the next BD if none runs; True when one runs."""
        if self.data is not None or self.buffer is not None:
            return True
        bd = self._next_bd()
        if bd is None or bd[0].take.value < 1:
            return False
        port, index = bd
        self.port, (self.slot,) = port, port.acquire(1)
        row = port.pool.flat[self.slot]
        if self.sends:
            self.data, self.sent, self.left = row[index], 0, self.repeat
        elif isinstance(index, slice):  # lands in place
            self.buffer, self.got = row[index], 0
        else:
            self.buffer, self.got = np.empty(len(index), row.dtype), 0
        return True

    def _next_bd(self):
        if self.limit is not None and self.done == self.limit:
            return None
        return self.chain[self.done % len(self.chain)]

    def sent_all(self) -> None:
        self.left -= 1
        if self.left:
            self.sent = 0
            return
        self.data = None
        self._finish()

    def received(self) -> None:
        index = self._next_bd()[1]
        if not isinstance(index, slice):
            self.port.pool.flat[self.slot][index] = self.buffer
        self.buffer = None
        self._finish()

    def _finish(self) -> None:
        self.port.give.value += 1
        self.done += 1

    def waiting(self) -> Lock | None:
        """The lock an idle channel waits on, if it has BDs left."""
        if self.data is not None or self.buffer is not None:
            return None
        bd = self._next_bd()
        return None if bd is None else bd[0].take


class Task:
    """A fill or drain of the runtime sequence: one shim BD through `index`."""

    def __init__(self, label: str, statement, array: np.ndarray, index: np.ndarray):
        self.label, self.statement, self.array, self.index = label, statement, array, index
        self.moved = 0
        self.complete = False


class ShimChannel(Channel):
    """A shim DMA channel running the runtime's tasks on one fifo, in order."""

    def __init__(self, label, nbytes, traffic, sends, tensor_traffic):
        super().__init__(label, nbytes, traffic)
        self.sends, self.tensor_traffic = sends, tensor_traffic
        self.queue: collections.deque[Task] = collections.deque()
        self.task: Task | None = None

    def arm(self) -> bool:
        if self.task is not None:
            return True
        if not self.queue:
            return False
        self.task = task = self.queue.popleft()
        if self.sends:
            self.data, self.sent = task.array.reshape(-1)[task.index], 0
        else:
            self.buffer, self.got = np.empty(len(task.index), task.array.dtype), 0
        return True

    def count(self, elements: int, slot: int) -> None:
        super().count(elements, slot)
        self.tensor_traffic[self.task.statement.tensor][slot] += elements * self.nbytes
        self.task.moved += elements

    def sent_all(self) -> None:
        self.data = None
        self._finish()

    def received(self) -> None:
        self.task.array.reshape(-1)[self.task.index] = self.buffer
        self.buffer = None
        self._finish()

    def _finish(self) -> None:
        self.task.complete = True
        self.task = None


class Stream:
    """A fifo's elements from its producer's channel to every consumer's
    channel, in lockstep."""

    def __init__(self, source: Channel, sinks: list[Channel]):
        self.source, self.sinks = source, sinks

    def step(self) -> bool:
        source, sinks = self.source, self.sinks
        moved = False
        while True:
            ready = [channel.arm() for channel in (source, *sinks)]
            if not all(ready):
                return moved
            k = min(len(source.data) - source.sent, *(len(s.buffer) - s.got for s in sinks))
            chunk = source.data[source.sent : source.sent + k]
            for sink in sinks:
                sink.buffer[sink.got : sink.got + k] = chunk
                sink.got += k
                sink.count(k, WRITTEN)
                if sink.got == len(sink.buffer):
                    sink.received()
            source.sent += k
            source.count(k, READ)
            if source.sent == len(source.data):
                source.sent_all()
            moved = True


# ---- workers ---------------------------------------------------------------------------------


class WorkerRun:
    """A worker's body as a coroutine: `step` runs it until it blocks."""

    def __init__(self, machine: _Machine, worker: Worker, ports: dict[str, Port]):
        self.machine, self.worker, self.ports = machine, worker, ports
        self.label = f"worker {worker.name} at {worker.tile}"
        self.held = {fifo: collections.deque() for fifo in ports}
        self.buffers = {
            b.name: _garbage(b.shape, element_type(b.dtype))
            if b.initial_value is None
            else np.full(b.shape, b.initial_value, element_type(b.dtype).numpy)
            for b in worker.buffers
        }
        self.calls = [op for op in walk(worker.body) if isinstance(op, Call)]
        self.iteration = 0
        self.took = False  # took a lock this iteration
        self.acted = False  # acquired, released or called this iteration
        self.finished = self.parked = False
        self.wait = None  # (lock, need) or (barrier, value) while blocked
        self.coroutine = self._run()

    def step(self) -> bool:
        moved = False
        while not (self.finished or self.parked):
            if self.wait is not None and not self._ready(*self.wait):
                return moved
            self.wait = next(self.coroutine, None)
            moved = True
        return moved

    def _ready(self, what: Lock | str, value: int) -> bool:
        """A lock holds at least `value`, or barrier `what` holds exactly it."""
        if isinstance(what, Lock):
            return what.value >= value
        return self.machine.barriers[what] == value

    @property
    def idle(self) -> bool:
        """Done, or at rest: holding nothing, parked or at the top of a forever body."""
        if self.finished:
            return True
        if any(self.held.values()):
            return False
        return self.parked or (self.worker.forever and not self.acted)

    def _run(self):
        while True:
            self.iteration += 1
            self.took = self.acted = False
            yield from self._body(self.worker.body)
            if not self.worker.forever:
                self.finished = True
                return
            if not self.took:
                self.parked = True
                return

    def _body(self, ops):
        for op in ops:
            if isinstance(op, Acquire):
                held = self.held[op.fifo]
                need = op.n - len(held)
                if need > 0:
                    port = self.ports[op.fifo]
                    while not self._ready(port.take, need):
                        yield port.take, need
                    held.extend(port.acquire(need))
                    self.took = self.acted = True
            elif isinstance(op, Release):
                self._release(op)
            elif isinstance(op, Call):
                self._call(op)
            elif isinstance(op, Loop):
                count = op.count
                if isinstance(count, Param):
                    count = self.machine.params[count.name]
                for _ in range(count):
                    yield from self._body(op.body)
            elif isinstance(op, WaitBarrier):
                while not self._ready(op.barrier, op.value):
                    yield op.barrier, op.value

    def _where(self) -> str:
        return f"design {self.machine.design.name}: worker {self.worker.name}, iteration {self.iteration}"

    def _release(self, op: Release) -> None:
        held = self.held[op.fifo]
        if op.n > len(held):
            raise WorkerError(
                f"{self._where()}: releases {op.n} objects of fifo {op.fifo} but holds {len(held)}"
            )
        for _ in range(op.n):
            held.popleft()
        self.ports[op.fifo].give.value += op.n
        self.acted = True

    def _call(self, call: Call) -> None:
        kernel = call.kernel
        if len(call.args) != len(kernel.args):
            raise KernelError(
                f"{self._call_text(call)} passes {len(call.args)} arguments; "
                f"the kernel takes {len(kernel.args)}"
            )
        args = [self._argument(call, i, arg) for i, arg in enumerate(call.args)]
        try:
            kernel.model(*args)
        except Exception as error:
            raise KernelError(
                f"{self._call_text(call)}: the model {kernel.model!r} raised "
                f"{type(error).__name__}: {error}"
            ) from error
        self.acted = True

    def _call_text(self, call: Call) -> str:
        """Which call of the body, for error messages (the body's calls are
        numbered in program order, so equal calls still read apart)."""
        number = next(i for i, c in enumerate(self.calls, 1) if c is call)
        return f"{self._where()}: call {number} of {len(self.calls)} ({call.kernel.symbol})"

    def _argument(self, call: Call, i: int, arg):
        if isinstance(arg, Obj):
            held = self.held[arg.fifo]
            if arg.index >= len(held):
                raise WorkerError(
                    f"{self._call_text(call)}: argument {i} is object {arg.index} of fifo {arg.fifo}, "
                    f"but the worker holds {len(held)}"
                )
            return self.ports[arg.fifo].pool.slots[held[arg.index]]
        if isinstance(arg, Buf):
            return self.buffers[arg.name]
        if isinstance(arg, Param):
            return self.machine.params[arg.name]
        return int(arg)

    def blocked(self) -> Blocked:
        holds = ", ".join(f"{len(h)} of {f}" for f, h in self.held.items() if h) or "nothing"
        actor = f"{self.label}, iteration {self.iteration}"
        if self.wait is None:
            return Blocked(actor, f"repeats an iteration that takes no lock; holds {holds}")
        what, value = self.wait
        if isinstance(what, Lock):
            return Blocked(
                actor,
                f"waits on {what} for {value} (it has {what.value}; depth "
                f"{self.ports[what.fifo].pool.depth}); holds {holds}",
                what.fifo,
                what.kind,
                value,
                what.value,
                self.idle,
            )
        return Blocked(
            actor,
            f"waits for barrier {what} to be {value} (it is {self.machine.barriers[what]}); "
            f"holds {holds}",
            idle=self.idle,
        )


class ProgrammedChannel(Channel):
    """A memtile channel of a programmed pool: it runs the slot BDs the
    runtime pushed onto it, in order, under per-slot locks."""

    def __init__(self, label, nbytes, traffic, pool: Pool, sends: bool, max_lock: int):
        super().__init__(label, nbytes, traffic)
        self.pool, self.sends, self.max_lock = pool, sends, max_lock
        self.steps: collections.deque = collections.deque()  # (task label, SlotBd)

    def push(self, label: str, task) -> None:
        self.steps.extend((label, bd) for _ in range(task.repeat_count) for bd in task.bds)

    def locks(self, slot: int) -> tuple[Lock, Lock]:
        """(the lock a BD on `slot` takes, the lock it gives)."""
        free, full = self.pool.slot_locks[slot]
        return (full, free) if self.sends else (free, full)

    def arm(self) -> bool:
        if self.data is not None or self.buffer is not None:
            return True
        if not self.steps:
            return False
        _, bd = self.steps[0]
        take, _ = self.locks(bd.slot)
        if take.value < bd.acquire:
            return False
        take.value -= bd.acquire
        row = self.pool.flat[bd.slot]
        if self.sends:
            self.data, self.sent = row, 0
        else:
            self.buffer, self.got = row, 0
        return True

    def sent_all(self) -> None:
        self.data = None
        self._finish()

    def received(self) -> None:
        self.buffer = None
        self._finish()

    def _finish(self) -> None:
        label, bd = self.steps.popleft()
        _, give = self.locks(bd.slot)
        give.value += bd.release
        if give.value > self.max_lock:
            raise LockError(
                f"{label}: its BD on slot {bd.slot} raises {give} to {give.value}, above the "
                f"device's max lock value {self.max_lock}"
            )

    def blocked(self) -> Blocked | None:
        """What a channel with BDs left waits on."""
        if not self.steps or self.data is not None or self.buffer is not None:
            return None
        label, bd = self.steps[0]
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


# ---- the runtime sequence ------------------------------------------------------------------


class SequenceRun:
    """The runtime sequence: issues tasks, finishes groups, sets barriers."""

    def __init__(self, machine: _Machine, tasks: dict[int, Task]):
        self.machine, self.tasks = machine, tasks
        self.pc = 0
        self.groups: dict[str, list[Task]] = {}  # open groups, in the order they began
        self.finishing: str | None = None
        self.finish_at = ""
        self.done = False

    def step(self) -> bool:
        moved = False
        sequence = self.machine.design.sequence
        while not self.done:
            if self.finishing is not None:
                if not all(t.complete for t in self.groups[self.finishing] if t.statement.wait):
                    return moved
                del self.groups[self.finishing]
                self.finishing = None
            elif self.pc < len(sequence):
                self._execute(sequence[self.pc])
                self.pc += 1
            elif self.groups:
                self.finishing = next(iter(self.groups))
                self.finish_at = f"the end of the sequence (group {self.finishing})"
            else:
                self.done = True
            moved = True
        return moved

    def _execute(self, statement) -> None:
        if isinstance(statement, (Fill, Drain)):
            task = self.tasks[self.pc]
            self.groups.setdefault(statement.group, []).append(task)
            self.machine.shim_channels[statement.fifo, isinstance(statement, Fill)].queue.append(
                task
            )
        elif isinstance(statement, Finish):
            if statement.group in self.groups:
                self.finishing = statement.group
                self.finish_at = f"sequence[{self.pc}] (finish of group {statement.group})"
        elif isinstance(statement, SetBarrier):
            self.machine.barriers[statement.barrier] = statement.value
        elif isinstance(statement, PoolTask):
            way = "fill" if statement.fill else "drain"
            channel = self.machine.programmed[statement.link, statement.fill]
            channel.push(f"sequence[{self.pc}] {way} of link {statement.link}", statement)
        elif isinstance(statement, SetLock):
            free, _ = self.machine.link_pools[statement.link].slot_locks[statement.slot]
            free.value = statement.value

    def blocked(self) -> Blocked:
        waits = [t for t in self.groups[self.finishing] if t.statement.wait and not t.complete]
        return Blocked(
            "runtime sequence",
            f"waits at {self.finish_at} for " + "; ".join(_progress(t) for t in waits),
        )


def _progress(task: Task) -> str:
    return f"{task.label} ({task.moved} of {len(task.index)} elements moved)"


# ---- building and running the machine ----------------------------------------------------------


class _Machine:
    def __init__(self, design: Design, arrays: dict[str, np.ndarray], params: dict[str, int]):
        self.design, self.arrays, self.params = design, arrays, params
        self.barriers = dict.fromkeys(design.barriers, 0)
        self.tensor_traffic = {t.name: [0, 0] for t in design.tensors}
        self.tile_traffic: dict[Tile, list[int]] = {}
        self.pools: list[Pool] = []
        self.link_pools = {link.name: self._link_pool(link) for link in design.links}
        self.worker_ports: dict[str, dict[str, Port]] = {w.name: {} for w in design.workers}
        self.shim_channels: dict[tuple[str, bool], ShimChannel] = {}
        self.programmed: dict[tuple[str, bool], ProgrammedChannel] = {}  # (link, fill)
        self.streams = [s for f in design.fifos if (s := self._connect(f)) is not None]
        self.workers = [WorkerRun(self, w, self.worker_ports[w.name]) for w in design.workers]
        self.sequence = SequenceRun(self, self._tasks())

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

    # ---- pools and their ports

    def _pool(self, where: str, tile: Tile, depth: int, fifo: ObjectFifo, parts=None) -> Pool:
        pool = Pool(where, tile, depth, fifo, parts or [(fifo.name, 0, fifo.size)])
        self.pools.append(pool)
        return pool

    def _link_pool(self, link: Link) -> Pool:
        """The pool of the larger objects, in the depth of that fifo's memtile
        end; a split's or join's small fifos each own a part of it."""
        fifo = self.design.fifo
        where = f"memtile {link.name} {link.tile}"
        if link.kind == "join":
            big = fifo(link.destinations[0])
            depth = big.depth_at(big.producer)
        else:
            big = fifo(link.sources[0])
            depth = big.depth_at(big.consumer("memtile", link.name))
        if link.kind == "forward":
            pool = self._pool(where, link.tile, depth, big)
            if link.programmed:
                pool.slot_locks = [
                    (
                        Lock(big.name, f"producer slot {i}", where, 0),
                        Lock(big.name, f"consumer slot {i}", where, 0),
                    )
                    for i in range(depth)
                ]
            return pool
        small = link.destinations if link.kind == "split" else link.sources
        offsets = link_offsets(self.design, link)
        parts = [(name, o, fifo(name).size) for name, o in zip(small, offsets)]
        return self._pool(where, link.tile, depth, big, parts)

    def _connect(self, fifo: ObjectFifo) -> Stream | None:
        """Pools for the fifo's core ends, and the stream with its channels."""
        tile = shared_memory_tile(self.design, fifo)
        if tile is not None:
            owner = next(w.name for w in self.design.workers if w.tile == tile)
            pool = self._pool(f"core {owner} {tile}", tile, fifo.depth_at(fifo.producer), fifo)
            self.worker_ports[fifo.producer.name][fifo.name] = Port(pool.parts[0], True)
            self.worker_ports[fifo.consumers[0].name][fifo.name] = Port(pool.parts[0], False)
            return None
        source = self._channel(fifo, fifo.producer, sends=True)
        sinks = [self._channel(fifo, c, sends=False) for c in fifo.consumers]
        return Stream(source, sinks)

    def _channel(self, fifo: ObjectFifo, end, sends: bool) -> Channel:
        nbytes = fifo.element.nbytes
        direction = "MM2S" if sends else "S2MM"
        if end.kind == "shim":
            label = f"shim {end.tile} {direction} of fifo {fifo.name}"
            channel = ShimChannel(
                label, nbytes, self._tile_traffic(end.tile), sends, self.tensor_traffic
            )
            self.shim_channels[fifo.name, sends] = channel
            return channel
        dims = fifo.dims_to_stream if sends else end.dims_from_stream
        repeat = (fifo.repeat_count or 1) if sends else 1
        if end.kind == "core":
            worker = self.design.worker(end.name)
            pool = self._pool(
                f"core {worker.name} {worker.tile}", worker.tile, fifo.depth_at(end), fifo
            )
            self.worker_ports[worker.name][fifo.name] = Port(pool.parts[0], sends)
            parts, limit = pool.parts, None
        else:
            pool = self.link_pools[end.name]
            link = self.design.link(end.name)
            if link.programmed:
                label = f"{pool.where} {direction} of fifo {fifo.name}"
                channel = ProgrammedChannel(
                    label,
                    nbytes,
                    self._tile_traffic(pool.tile),
                    pool,
                    sends,
                    self.design.device.max_lock_value,
                )
                self.programmed[link.name, not sends] = channel
                return channel
            small = link.destinations if link.kind == "split" else link.sources
            parts = (
                [p for p in pool.parts if p.fifo == fifo.name] if fifo.name in small else pool.parts
            )
            limit = fifo.iter_count and fifo.iter_count * pool.depth * len(parts)
        label = f"{pool.where} {direction} of fifo {fifo.name}"
        chain = [(Port(part, not sends), self._bd_index(label, dims, part)) for part in parts]
        return PoolChannel(
            label, nbytes, self._tile_traffic(pool.tile), chain, sends, repeat, limit
        )

    def _tile_traffic(self, tile: Tile) -> list[int]:
        return self.tile_traffic.setdefault(tile, [0, 0])

    def _bd_index(self, label: str, dims, part: Part):
        """The elements of a slot one BD moves, in stream order."""
        if not dims:
            return slice(part.offset, part.offset + part.size)
        tap = TAP.of_dims(dims, part.offset)
        where = f"design {self.design.name}: {label}"
        if tap.count != part.size:
            raise TransferError(
                f"{where}: dimensions {list(dims)} move {tap.count} elements, but each BD "
                f"moves {part.size}"
            )
        index = tap.indices()
        _check_bounds(
            f"{where}: dimensions {list(dims)}", index, part.pool.flat.shape[1], "the object"
        )
        return index

    # ---- the runtime's tasks

    def _tasks(self) -> dict[int, Task]:
        tasks = {}
        for i, statement in enumerate(self.design.sequence):
            if not isinstance(statement, (Fill, Drain)):
                continue
            fills = isinstance(statement, Fill)
            fifo, tensor = self.design.fifo(statement.fifo), self.design.tensor(statement.tensor)
            if fifo.dims_to_stream if fills else fifo.consumer("shim").dims_from_stream:
                raise TransferError(
                    f"design {self.design.name}: fifo {fifo.name} has dimensions at its runtime "
                    "end; the task's TAP orders a shim transfer"
                )
            label = (
                f"sequence[{i}] fill of fifo {fifo.name} from {tensor.name}"
                if fills
                else f"sequence[{i}] drain of fifo {fifo.name} into {tensor.name}"
            )
            tap = statement.tap or TAP.linear(tensor.size)
            index = tap.indices()
            if statement.offset_param is not None:
                offset = self._runtime_offset(label, statement.offset_param, tensor)
                index = index + offset
                label += f" at {statement.offset_param}={offset}"
            _check_bounds(
                f"design {self.design.name}: {label}: TAP {tap}",
                index,
                tensor.size,
                f"tensor {tensor.name}",
            )
            if tap.count % fifo.size:
                raise TransferError(
                    f"design {self.design.name}: {label}: TAP {tap} moves {tap.count} elements, "
                    f"not a whole number of {fifo.size}-element objects "
                    f"({tap.count // fifo.size} and {tap.count % fifo.size} left over)"
                )
            tasks[i] = Task(label, statement, self.arrays[tensor.name], index)
        return tasks

    def _runtime_offset(self, label: str, param: str, tensor) -> int:
        """The parameter's value, which the shim adds to the BD's address: in
        whole 4-byte words, since mlir-aie's DMA-to-NPU lowering rounds a
        misaligned parameter down to the word, with only a compile warning."""
        offset = self.params[param]
        nbytes = element_type(tensor.dtype).nbytes
        if offset * nbytes % 4:
            raise TransferError(
                f"design {self.design.name}: {label}: {param}={offset} elements is "
                f"{offset * nbytes} B, not a whole number of 4-byte words"
            )
        return offset

    # ---- after the run

    def _check_finished(self) -> None:
        """Raise `DeadlockError` if anything is left undone. The report lists
        what is wrong (the causes) and, after them, the actors at rest that
        a cause holds up (idle workers, channels waiting for room)."""
        causes, at_rest = [], []
        if not self.sequence.done:
            causes.append(self.sequence.blocked())
        for worker in self.workers:
            if worker.wait is not None or not worker.idle:
                (at_rest if worker.idle else causes).append(worker.blocked())
        for stream in self.streams:
            for channel in (stream.source, *stream.sinks):
                stuck = _stuck(channel, stream)
                if stuck is None and isinstance(channel, ProgrammedChannel):
                    stuck = channel.blocked()
                if stuck is not None:
                    causes.append(stuck)
                elif (room := _waiting_for_room(channel)) is not None:
                    at_rest.append(room)
        for pool in self.pools:
            for i, (_, full) in enumerate(pool.slot_locks):
                if full.value:
                    causes.append(
                        Blocked(
                            f"slot {i} of {pool.where}",
                            f"filled, {full.value} uses never sent",
                            full.fifo,
                            "consumer",
                        )
                    )
            for part in pool.parts:
                if part.full.value:
                    causes.append(
                        Blocked(
                            f"fifo {part.fifo} at {pool.where}",
                            f"{_objects(part.full.value)} full in the pool, never taken",
                            part.fifo,
                            "consumer",
                        )
                    )
        if causes:
            blocked = (*causes, *at_rest)
            lines = "\n".join(f"  {b}" for b in blocked)
            raise DeadlockError(f"design {self.design.name} cannot finish:\n{lines}", blocked)

    def _check_coverage(self) -> None:
        writes = collections.defaultdict(list)
        for task in self.sequence.tasks.values():
            if isinstance(task.statement, Drain):
                writes[task.statement.tensor].append(task.index)
        for tensor in self.design.tensors:
            if tensor.direction is Direction.IN:
                continue
            index = writes.get(tensor.name, [])
            counts = np.bincount(
                np.concatenate(index) if index else np.zeros(0, np.int64), minlength=tensor.size
            )
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


def _element(tensor, flat: int) -> str:
    position = ", ".join(map(str, np.unravel_index(flat, tensor.shape)))
    return f"{tensor.name}[{position}]"


def _check_bounds(where: str, index: np.ndarray, extent: int, what: str) -> None:
    bad = (index < 0) | (index >= extent)
    if bad.any():
        step = int(np.argmax(bad))
        raise OutOfBoundsError(
            f"{where} reaches element {index[step]} at step {step} of {len(index)}; "
            f"{what} has elements 0..{extent - 1}"
        )


def _objects(n: int) -> str:
    return f"{n} object{'s' if n != 1 else ''}"


def _stuck(channel: Channel, stream: Stream) -> Blocked | None:
    """A channel part-way through a transfer, or a shim channel holding a task."""
    label = channel.label
    if isinstance(channel, ShimChannel):
        if channel.task is None:
            return None
        label = f"{channel.task.label} ({channel.label})"
    if channel.data is not None:
        idle = [s.label for s in stream.sinks if s.buffer is None]
        return Blocked(
            label,
            f"sent {channel.sent} of {len(channel.data)} elements of its BD; "
            f"{', '.join(idle) or 'no consumer'} takes none",
        )
    if channel.buffer is not None and (channel.got or isinstance(channel, ShimChannel)):
        return Blocked(label, f"received {channel.got} of {len(channel.buffer)} elements of its BD")
    return None


def _waiting_for_room(channel: Channel) -> Blocked | None:
    """A receiving channel whose pool is full."""
    if not isinstance(channel, PoolChannel) or channel.sends:
        return None
    lock = channel.waiting()
    if lock is None:
        return None
    return Blocked(
        channel.label,
        f"waits on {lock} for 1 (it has {lock.value}): the pool is full",
        lock.fifo,
        lock.kind,
        1,
        lock.value,
    )
