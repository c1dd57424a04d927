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

import itertools

import numpy as np

from iron.design.kernel_batch import batch_of

MOVE, MOVE_ONE, CALL, CAPTURE, WRITE, FLUSH, WRITE_TO = range(7)  # the kinds of events
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
        self.calls: list = []  # their CALL events, in the order they ran
        #: the calls (by number) in the order of the stacks' rows, as
        #: `_merged` groups them (empty: in the order they ran)
        self.order: list[int] = []
        self._rows: list[int] | None = None  # each call's row
        self.stacks: list | None = None
        self.scalars: dict | None = None  # position -> values, when no parameter sets them
        self.results = None

    def add(self, event) -> tuple:
        """The CAPTURE of one more call: each read object whole, from its buffer."""
        args, refs = event[2], event[7]
        i = len(self.calls)
        self.calls.append(event)
        copies = tuple((p, refs[p], slice(0, args[p].size), ONE) for p in self.batch.reads)
        return (CAPTURE, self, i, copies)

    @property
    def rows(self) -> list[int]:
        if self._rows is None:
            self._rows = list(range(len(self.calls)))
            for row, i in enumerate(self.order):
                self._rows[i] = row
        return self._rows

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
        """Each scalar position's values, row by row."""
        if self.scalars is not None:
            return self.scalars
        positions = [p for p, a in enumerate(self.calls[0][2]) if not isinstance(a, np.ndarray)]
        calls = [_args(self.calls[i], params) for i in self.order or range(len(self.calls))]
        values = {p: np.array([call[p] for call in calls], np.int64) for p in positions}
        if not any(call[3] for call in self.calls):  # no parameter: the same every replay
            self.scalars = values
        return values

    def _blame(self, error: Exception, params) -> None:
        """A batch that raised, as the `KernelError` of the first of its calls
        whose model raises on what it read (on scratch copies of what it
        writes), else of its first call."""
        for i, call in enumerate(self.calls):
            args = [
                self.stacks[p][self.rows[i]].reshape(arg.shape).copy()
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
    scheduled = _forwarded(_scheduled(_joined(events)), buffers, tensors)
    return _fused(_resolved(_merged(scheduled)), buffers, tensors)


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
                if capture[3]:
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
            _, plan, i, row, args = event
            try:
                plan.batch.write(
                    plan.results[row], *(args or _args(plan.calls[i], params)), **plan.keywords
                )
            except Exception as error:
                call = plan.calls[i]
                raise call[4].kernel_error(call[5], call[6], error) from error
        elif kind == WRITE_TO:
            _, plan, first, count, target, at = event
            buffers[target][at] = np.asarray(plan.results[first : first + count]).reshape(-1)
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
            try:
                for plan in plans:
                    plan.compute(params)
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
            for position, ref, index, mode in event[3]:
                fill = fills.get(ref)
                copies.append((position, ref, index, mode) if fill is None else
                              (position, fill[1], fill[2], mode))  # fmt: skip
            return (*event[:3], tuple(copies))
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
    nothing between them writes what they read. Calls whose reads continue
    one another (each object the next run of elements of its buffer, or the
    same elements again) form a group, and a group's rows are consecutive
    in the stacks: a plan's rows are numbered group by group (`_Plan.rows`),
    so one copy fills a group's rows of each read, however the cores'
    calls interleave."""
    out: list = []
    last: dict = {}  # plan -> its open _Captures
    for event in events:
        if event[0] != CAPTURE:
            written = _writes(event)
            for captures in last.values():
                captures.written |= written
            out.append(event)
            continue
        plan, copies = event[1], event[3]
        captures = last.get(plan)
        if captures is None or any(copy[1] in captures.written for copy in copies):
            captures = last[plan] = _Captures(plan)
            out.append(captures)
        captures.add(event[2], copies)
    return [e.event() if isinstance(e, _Captures) else e for e in out]


class _Captures:
    """One capture event of a plan as it is built: its groups of calls, and
    what was written since it began (a later capture reading that cannot
    join it)."""

    def __init__(self, plan: _Plan):
        self.plan = plan
        self.written: set = set()
        self.groups: list = []  # [calls, [[position, ref, index, mode], ...]]
        self.ends: dict = {}  # continuation key -> the group it continues

    def add(self, i: int, copies) -> None:
        for key in itertools.product(*(_tokens(copy) for copy in copies)):
            group = self.ends.get(key)
            if group is not None:
                self._forget(group)
                group[0].append(i)
                for read, (_, _, index, _), (_, _, way, *_) in zip(group[1], copies, key):
                    read[3] = ROWS if way == "at" else SAME
                    if way == "at":
                        read[2] = slice(read[2].start, index.stop)
                self._remember(group)
                return
        group = [[i], [[position, ref, index, ONE] for position, ref, index, _ in copies]]
        self.groups.append(group)
        self._remember(group)

    def _keys(self, group) -> list:
        ends = []
        for position, ref, index, mode in group[1]:
            if index.__class__ is not slice or index.step is not None:
                ends.append([(position, ref, "same", id(index))])
                continue
            ways = []
            if mode in (ONE, ROWS):
                ways.append((position, ref, "at", index.stop))
            if mode in (ONE, SAME):
                ways.append((position, ref, "same", index.start, index.stop))
            ends.append(ways)
        return [tuple(key) for key in itertools.product(*ends)]

    def _remember(self, group) -> None:
        for key in self._keys(group):
            self.ends.setdefault(key, group)

    def _forget(self, group) -> None:
        for key in self._keys(group):
            if self.ends.get(key) is group:
                del self.ends[key]

    def event(self) -> tuple:
        plan, copies = self.plan, []
        for calls, reads in self.groups:
            first = len(plan.order)
            plan.order.extend(calls)
            rows = slice(first, first + len(calls))
            for position, ref, index, mode in reads:
                copies.append(
                    (position, ref, index, rows, (len(calls), -1) if mode == ROWS else None)
                )
        return (CAPTURE, plan, tuple(copies))


def _tokens(copy) -> list:
    """How a capture's copy could continue a group (`_Captures._keys`)."""
    position, ref, index, _ = copy
    if index.__class__ is not slice or index.step is not None:
        return [(position, ref, "same", id(index))]
    return [(position, ref, "at", index.start), (position, ref, "same", index.start, index.stop)]


def _resolved(events: list) -> list:
    """Each WRITE with its call's row and, where no parameter sets one of
    them, its arguments: (WRITE, plan, call, row, arguments or None)."""

    def resolved(event) -> tuple:
        if event[0] == FLUSH:
            return (FLUSH, event[1], tuple(resolved(e) for e in event[2]))
        if event[0] != WRITE:
            return event
        plan, i = event[1], event[2]
        call = plan.calls[i]
        return (WRITE, plan, i, plan.rows[i], None if call[3] else call[2])

    return [resolved(event) for event in events]


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
    if kind == WRITE_TO:
        return {event[4]}
    if kind == FLUSH:
        return set().union(*(_writes(e) for e in event[2]))
    return set()


def _fused(events: list, buffers: list, tensors: int) -> list:
    """A call's whole result put straight where a move takes its object
    whole into a runtime tensor (the write and the move dropped), where
    nothing else reads that slot before it is next written whole; then such
    puts of one plan's consecutive rows into consecutive elements as one."""
    candidates: dict = {}  # slot -> [its write's place, its move's place or None, ok]
    fused: dict = {}  # place of a move -> the WRITE_TO that replaces it
    dropped: set = set()  # places of writes

    def settle(slot) -> None:
        candidate = candidates.pop(slot, None)
        if candidate is not None and candidate[2] and candidate[1] is not None:
            write_place, move_place, _, write, move = candidate
            dropped.add(write_place)
            fused[move_place] = (WRITE_TO, write[1], write[3], 1, move[3], move[4])

    def spoil(ref) -> None:
        candidate = candidates.get(ref)
        if candidate is not None:
            candidate[2] = False

    def visit(event, place) -> None:
        kind = event[0]
        if kind == WRITE:
            _, plan, i, _, args = event
            batch = plan.batch
            slot = plan.calls[i][7][batch.writes[0]] if batch.writes else None
            whole = (
                batch.whole is not None
                and args is not None
                and slot >= tensors
                and batch.whole(*args, **plan.keywords)
            )
            if whole:
                settle(slot)
                candidates[slot] = [place, None, True, event, None]
            else:
                for p in batch.writes:
                    spoil(plan.calls[i][7][p])
                    settle(plan.calls[i][7][p])
        elif kind == MOVE_ONE:
            _, source, index, target, at = event
            candidate = candidates.get(source)
            if candidate is not None:
                whole = index.__class__ is slice and index == slice(0, buffers[source].size)
                same_flush = place[0] == candidate[0][0]  # its results are dropped after it
                if (
                    candidate[1] is None
                    and same_flush
                    and whole
                    and target < tensors
                    and at.__class__ is slice
                ):
                    candidate[1], candidate[4] = place, event
                else:
                    candidate[2] = False
            spoil(target)
            settle(target)
        elif kind == MOVE:
            spoil(event[1])
            for target, _ in event[3]:
                spoil(target)
                settle(target)
        elif kind == CALL:
            for ref in event[7]:
                if ref is not None:
                    spoil(ref)
                    settle(ref)
        elif kind == CAPTURE:
            for copy in event[2]:
                spoil(copy[1])

    for n, event in enumerate(events):
        if event[0] == FLUSH:
            for m, inner in enumerate(event[2]):
                visit(inner, (n, m))
        else:
            visit(event, (n, None))
    for slot in list(candidates):
        settle(slot)

    def rebuilt(tail, n) -> list:
        out = [fused.get((n, m), e) for m, e in enumerate(tail) if (n, m) not in dropped]
        return _puts_joined(out)

    return [
        (FLUSH, e[1], tuple(rebuilt(e[2], n))) if e[0] == FLUSH else e
        for n, e in enumerate(events)
        if (n, None) not in dropped
    ]


def _puts_joined(tail: list) -> list:
    """A flush's puts (WRITE_TO) of one plan's consecutive rows into
    consecutive elements of one tensor as one put, at the first's place,
    while nothing else in the tail reads or writes that tensor (the puts
    themselves never overlap: a drain writes each element at most once)."""
    out: list = []
    ends: dict = {}  # (plan, tensor, next row, next element) -> the put's place in out
    for event in tail:
        if event[0] != WRITE_TO:
            touched = _writes(event) | _reads(event)
            for key in [key for key in ends if key[1] in touched]:
                del ends[key]
            out.append(event)
            continue
        _, plan, row, count, target, at = event
        place = ends.pop((plan, target, row, at.start), None)
        if place is None:
            place = len(out)
            out.append(event)
        else:
            _, _, first, joined, _, start = out[place]
            out[place] = (
                WRITE_TO,
                plan,
                first,
                joined + count,
                target,
                slice(start.start, at.stop),
            )
        put = out[place]
        ends[(plan, target, put[2] + put[3], put[5].stop)] = place
    return out


def _reads(event) -> set:
    """The buffers a waiting event reads (a flush's tail holds no capture)."""
    kind = event[0]
    if kind in (MOVE_ONE, MOVE):
        return {event[1]}
    if kind == CALL:
        return {ref for ref in event[7] if ref is not None}
    return set()
