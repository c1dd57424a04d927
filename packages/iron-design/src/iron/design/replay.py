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
        """The CAPTURE of one more call."""
        args = event[2]
        i = len(self.calls)
        self.calls.append(event)
        return (CAPTURE, self, i, tuple((p, args[p].reshape(-1)) for p in self.batch.reads))

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


def program(events: list) -> list:
    """The record `events` (MOVE and CALL, in order) as a replay's program."""
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

    for event in _joined(events):
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
                    held += sum(view.nbytes for _, view in capture[3])
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
            _, plan, i, copies = event
            if i == 0:
                plan.open()
            stacks = plan.stacks
            for position, view in copies:
                stacks[position][i] = view
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
