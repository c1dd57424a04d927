"""A recorded run as a program to replay, kernel calls batched.

The machine records, in order, each move of elements (from a buffer of the
machine to others, by number: runtime tensors, then pool slots) and each
kernel call with its arguments and the buffers they are. `program` turns
that record into what a replay runs:

- moves to one buffer that continue one another become one move;
- the calls of a kernel model with a batch form (`iron.design.kernel_batch`)
  are taken together: each call's reads are captured where it ran (a row
  of a stack), and the results are computed at once at a flush, then
  written call by call;
- a call's write, and every later event that reads or writes what a
  waiting write touches (or writes what such an event reads), wait for the
  flush, in their order; everything else runs where it was. So every
  buffer sees its reads and writes in the recorded order.

A flush comes when a call would read what a waiting write has not written
yet, when the captured rows reach `CAPTURE_BYTES`, and at the end.
Dependencies are taken per buffer (a slot, a tensor, a local buffer), never
finer: a kernel model without a batch form reads and writes all its objects.
"""

from __future__ import annotations

import numpy as np

from iron.design.kernel_batch import batch_of

MOVE, MOVE_ONE, CALL, CAPTURE, WRITE, FLUSH = range(6)  # the kinds of events
#: how a CAPTURE's copy fills the rows of its calls: one row, each row the
#: next piece of a run of elements, or every row the same elements
ONE, ROWS, SAME = range(3)

#: the most bytes of captured reads one flush holds (bounds a replay's memory)
CAPTURE_BYTES = 1 << 23


class _Plan:
    """The calls of one batched kernel model up to a flush: at a replay, the
    stacks its captures fill and the results its flush computes."""

    def __init__(self, model, batch, keywords):
        self.model, self.batch, self.keywords = model, batch, keywords
        self.calls: list = []  # their CALL events
        self.stacks: list | None = None
        self.scalars: dict | None = None  # position -> values, when no parameter sets them
        self.results = None

    def add(self, event) -> tuple:
        """The CAPTURE of one more call: each read object whole, from its buffer."""
        args, refs = event[2], event[7]
        i = len(self.calls)
        self.calls.append(event)
        copies = tuple((p, refs[p], slice(0, args[p].size), ONE) for p in self.batch.reads)
        return (CAPTURE, self, i, i + 1, copies)

    def open(self) -> None:
        n, args = len(self.calls), self.calls[0][2]
        self.stacks = [
            np.empty((n, args[p].size), args[p].dtype) if p in self.batch.reads else None
            for p in range(len(args))
        ]

    def compute(self, params) -> None:
        arguments = list(self.stacks or [None] * len(self.calls[0][2]))
        for position, values in self._scalars(params).items():
            arguments[position] = values
        try:
            self.results = self.batch.compute(*arguments, **self.keywords)
        except Exception as error:
            self._blame(error, params)
        finally:
            self.stacks = None

    def _scalars(self, params) -> dict:
        if self.scalars is not None:
            return self.scalars
        positions = [p for p, a in enumerate(self.calls[0][2]) if not isinstance(a, np.ndarray)]
        calls = [_args(call, params) for call in self.calls]
        values = {p: np.array([call[p] for call in calls], np.int64) for p in positions}
        if not any(call[3] for call in self.calls):  # no parameter: the same every replay
            self.scalars = values
        return values

    def write(self, i: int, params) -> None:
        call = self.calls[i]
        try:
            self.batch.write(self.results[i], *_args(call, params), **self.keywords)
        except Exception as error:
            raise call[4].kernel_error(call[5], call[6], error) from error

    def _blame(self, error: Exception, params) -> None:
        """A batch that raised, as the `KernelError` of the first of its calls
        whose model raises on what it read (on scratch copies of what it
        writes), else of its first call."""
        for i, call in enumerate(self.calls):
            args = [
                self.stacks[p][i].reshape(arg.shape).copy()
                if p in self.batch.reads
                else (np.empty_like(arg) if isinstance(arg, np.ndarray) else arg)
                for p, arg in enumerate(_args(call, params))
            ]
            try:
                self.model(*args)
            except Exception as own:
                raise call[4].kernel_error(call[5], call[6], own) from own
        first = self.calls[0]
        raise first[4].kernel_error(first[5], first[6], error) from error


def _args(call, params) -> tuple:
    """A CALL event's arguments, with this run's parameters."""
    _, _, args, named, *_ = call
    if not named:
        return args
    args = list(args)
    for i, name in named:
        args[i] = params[name]
    return tuple(args)


def program(events: list, buffers: list, tensors: int) -> list:
    """The record `events` (MOVE and CALL, in order) as a replay's program,
    over the machine's `buffers` (their sizes), the first `tensors` of them
    the runtime tensors."""
    return _merged(_forwarded(_scheduled(_joined(events)), buffers, tensors))


def _scheduled(events: list) -> list:
    """Batched calls captured where they ran and flushed together; what
    waits for their writes in the flush's tail (the module's docstring)."""
    out: list = []
    tail: list = []  # the events waiting for the flush, in order
    reading: set = set()  # what they read
    writing: set = set()  # what they write
    plans: dict = {}  # model -> its _Plan since the last flush
    held = 0  # bytes the plans capture

    def flush():
        nonlocal tail, reading, writing, plans, held
        if plans or tail:
            out.append((FLUSH, tuple(plans.values()), tuple(tail)))
        tail, reading, writing, plans, held = [], set(), set(), {}, 0

    for event in events:
        if event[0] == CALL:
            found = batch_of(event[1])
            refs = event[7]
            if found is not None:
                batch, keywords = found
                reads = {refs[p] for p in batch.reads}
                if reads & writing:
                    flush()
                plan = plans.get(event[1])
                if plan is None:
                    plan = plans[event[1]] = _Plan(event[1], batch, keywords)
                capture = plan.add(event)
                if capture[4]:
                    held += sum(event[2][p].nbytes for p in batch.reads)
                    out.append(capture)
                if batch.writes:
                    tail.append((WRITE, plan, capture[2]))
                    writing |= {refs[p] for p in batch.writes}
                if held >= CAPTURE_BYTES:
                    flush()
                continue
            reads = writes = {ref for ref in refs if ref is not None}
        elif event[0] == MOVE_ONE:
            reads, writes = {event[1]}, {event[3]}
        else:
            reads, writes = {event[1]}, {target for target, _ in event[3]}
        if reads & writing or writes & (reading | writing):
            tail.append(event)
            reading |= reads
            writing |= writes
        else:
            out.append(event)
    flush()
    return out


def play(events, buffers: list, params) -> None:
    """Run a program (or a flush's waiting events) on `buffers`."""
    for event in events:
        kind = event[0]
        if kind == MOVE_ONE:
            buffers[event[3]][event[4]] = buffers[event[1]][event[2]]
        elif kind == CAPTURE:
            plan = event[1]
            if plan.stacks is None:
                plan.open()
            stacks = plan.stacks
            for position, ref, index, rows, shape in event[2]:
                chunk = buffers[ref][index]
                stacks[position][rows] = chunk if shape is None else chunk.reshape(shape)
        elif kind == WRITE:
            event[1].write(event[2], params)
        elif kind == MOVE:
            chunk = buffers[event[1]][event[2]]
            for target, at in event[3]:
                buffers[target][at] = chunk
        elif kind == CALL:
            _, model, _, _, worker, lowered, iteration, _ = event
            try:
                model(*_args(event, params))
            except Exception as error:
                raise worker.kernel_error(lowered, iteration, error) from error
        else:  # FLUSH
            _, plans, tail = event
            for plan in plans:
                plan.compute(params)
            try:
                play(tail, buffers, params)
            finally:
                for plan in plans:
                    plan.results = None


def _joined(events: list) -> list:
    """The recorded events with each move to one buffer as a `MOVE_ONE`, and
    such moves that continue one another (from and to the next elements of
    the same buffers) joined into one."""
    out: list = []
    for event in events:
        if event[0] != MOVE or len(event[3]) != 1:
            out.append(event)
            continue
        _, ref, index, ((target, at),) = event
        last = out[-1] if out else None
        if (
            last is not None
            and last[0] == MOVE_ONE
            and (last[1], last[3]) == (ref, target)
            and index.__class__ is slice
            and at.__class__ is slice
            and last[2].__class__ is slice
            and last[4].__class__ is slice
            and (last[2].stop, last[4].stop) == (index.start, at.start)
        ):
            out[-1] = (
                MOVE_ONE,
                ref,
                slice(last[2].start, index.stop),
                target,
                slice(last[4].start, at.stop),
            )
        else:
            out.append((MOVE_ONE, ref, index, target, at))
    return out


def _forwarded(events: list, buffers: list, tensors: int) -> list:
    """Captures read straight from where a whole slot was filled from, and
    the fills nothing else reads dropped. A move that fills a whole slot or
    local buffer (never a runtime tensor: the run's result) from a source not
    written since is what a capture of it reads; the fill stays if anything
    but a capture reads it before it is next filled whole, or if a write
    covers part of it."""
    fills: dict = {}  # slot -> [its filling move, source, index, needed]
    by_source: dict = {}  # source -> slots its fills forward from
    dropped: set = set()

    def read(ref) -> None:
        fill = fills.get(ref)
        if fill is not None:
            fill[3] = True

    def write(ref, fill=None) -> None:
        old = fills.pop(ref, None)
        if old is not None:
            by_source.get(old[1], set()).discard(ref)
            if fill is None:  # written in part: what the old fill left is still there
                old[3] = True
            elif not old[3]:
                dropped.add(id(old[0]))
        for slot in by_source.pop(ref, ()):  # their source changes: keep those fills
            fills.pop(slot)[3] = True
        if fill is not None:
            fills[ref] = fill
            by_source.setdefault(fill[1], set()).add(ref)

    def visit(event) -> tuple:
        kind = event[0]
        if kind == MOVE_ONE:
            _, source, index, target, at = event
            read(source)
            whole = (
                target >= tensors and at.__class__ is slice and at == slice(0, buffers[target].size)
            )
            write(target, [event, source, index, False] if whole and source != target else None)
        elif kind == MOVE:
            read(event[1])
            for target, _ in event[3]:
                write(target)
        elif kind == CALL:
            refs = [ref for ref in event[7] if ref is not None]
            for ref in refs:
                read(ref)
            for ref in refs:
                write(ref)
        elif kind == CAPTURE:
            copies = []
            for position, ref, index, mode in event[4]:
                fill = fills.get(ref)
                copies.append((position, ref, index, mode) if fill is None else
                              (position, fill[1], fill[2], mode))  # fmt: skip
            return (*event[:4], tuple(copies))
        elif kind == WRITE:
            plan, i = event[1], event[2]
            for p in plan.batch.writes:
                write(plan.calls[i][7][p])
        return event

    out = []
    for event in events:
        if event[0] == FLUSH:
            out.append((FLUSH, event[1], tuple(visit(e) for e in event[2])))
        else:
            out.append(visit(event))
    dropped |= {id(fill[0]) for fill in fills.values() if not fill[3]}

    def kept(events) -> list:
        return [e for e in events if id(e) not in dropped]

    return [(FLUSH, e[1], tuple(kept(e[2]))) if e[0] == FLUSH else e for e in kept(out)]


def _merged(events: list) -> list:
    """The captures of one plan between two of its flushes as one event, where
    nothing between them writes what they read: the rows of a run of calls
    (every k-th row, so interleaved cores each keep their own run) from a run
    of elements, or the same elements for every row."""
    out: list = []
    last: dict = {}  # plan -> [its capture event (a list of runs), refs written since]
    for event in events:
        if event[0] != CAPTURE:
            written = _writes(event)
            for entry in last.values():
                entry[1] |= written
            out.append(event)
            continue
        _, plan, i, _, copies = event
        entry = last.get(plan)
        if entry is None or any(copy[1] in entry[1] for copy in copies):
            runs: list = []
            last[plan] = [runs, set()]
            out.append((CAPTURE, plan, runs))
        else:
            runs = entry[0]
        for position, ref, index, _ in copies:
            if not any(_extend(run, position, ref, index, i) for run in runs):
                runs.append([position, ref, index, ONE, i, 1, 1])
    return [
        (CAPTURE, e[1], tuple(_copy(run) for run in e[2])) if e[0] == CAPTURE else e for e in out
    ]


def _extend(run: list, position, ref, index, row: int) -> bool:
    """Add `row`, reading `index` of buffer `ref`, to a run of rows [position,
    ref, index, mode, first row, row step, rows] if it continues it."""
    run_position, run_ref, run_index, mode, first, step, count = run
    if (run_position, run_ref) != (position, ref):
        return False
    if count > 1 and row != first + step * count:
        return False
    if count == 1 and row <= first:
        return False
    if mode in (ONE, SAME) and _same(run_index, index):
        mode = SAME
    elif (
        mode in (ONE, ROWS)
        and index.__class__ is slice
        and run_index.__class__ is slice
        and index.step is None
        and run_index.step is None
        and run_index.stop == index.start
    ):
        mode, index = ROWS, slice(run_index.start, index.stop)
    else:
        return False
    run[2:] = [
        index if mode == ROWS else run_index,
        mode,
        first,
        row - first if count == 1 else step,
        count + 1,
    ]
    return True


def _copy(run: list) -> tuple:
    """A run as a capture's copy: (position, buffer, index, rows, shape of
    the rows' elements or None to repeat them)."""
    position, ref, index, mode, first, step, count = run
    rows = slice(first, first + step * (count - 1) + 1, step)
    return (position, ref, index, rows, (count, -1) if mode == ROWS else None)


def _writes(event) -> set:
    """The buffers an event (or a flush's tail) writes."""
    kind = event[0]
    if kind == MOVE_ONE:
        return {event[3]}
    if kind == MOVE:
        return {target for target, _ in event[3]}
    if kind == CALL:
        return {ref for ref in event[7] if ref is not None}
    if kind == WRITE:
        return {event[1].calls[event[2]][7][p] for p in event[1].batch.writes}
    if kind == FLUSH:
        return set().union(*(_writes(e) for e in event[2]))
    return set()


def _same(index, other) -> bool:
    if index.__class__ is slice:
        return index == other
    return index is other
