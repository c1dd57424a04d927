"""OperatorSequence: a runlist and where every buffer of it lives.

A runlist is ``[(operator, *buffers)]`` (or recorded `Step`s, which carry
their per-call bindings), one buffer per arg spec in spec order: a name, or
a `View` of bytes a..b of a buffer (``"base[a:b]"`` text is read once, here). The layout puts
every buffer in one of three arenas: ``input`` and ``output`` (host I/O,
packed in order) and ``scratch``. In scratch, buffers with a host address of
their own (explicitly sized ones: weights, states, anything sliced) are
packed first; intermediates are planned by liveness with `iron.alloc.place`
and rebased past them, so a planned buffer can never land on a weight.
Every offset is aligned to the device's coherence granule (64 B).
"""

from __future__ import annotations

import logging

import attrs

from iron.alloc import ArenaPlan, Plan, live_ranges, peak_live_bytes, place
from iron.core import Device, Operator, OperatorError, View
from iron.core.capture import Graph, Step
from iron.core.view import base_of

log = logging.getLogger("iron.dispatch")

ALIGNMENT = 64


class LayoutError(ValueError):
    """A runlist whose buffers cannot be laid out (sizes, slices, I/O)."""


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


@attrs.frozen
class Layout:
    """Where each buffer lives: per arena, base name -> (offset, nbytes)."""

    input: dict[str, tuple[int, int]]
    output: dict[str, tuple[int, int]]
    scratch: dict[str, tuple[int, int]]

    @property
    def arenas(self) -> dict[str, dict[str, tuple[int, int]]]:
        return {"input": self.input, "output": self.output, "scratch": self.scratch}

    def size(self, arena: str) -> int:
        return max((o + n for o, n in self.arenas[arena].values()), default=0)

    def locate(self, ref: str | View) -> tuple[str, int, int]:
        """(arena, offset, nbytes) of a buffer or a view of one."""
        base = base_of(ref)
        for arena, table in self.arenas.items():
            if base in table:
                offset, nbytes = table[base]
                if isinstance(ref, View):
                    return arena, offset + ref.start, ref.nbytes
                return arena, offset, nbytes
        raise KeyError(f"no buffer {base!r} in this layout")


def _pack(names, sizes, alignment: int, start: int = 0) -> tuple[dict[str, tuple[int, int]], int]:
    table, cursor = {}, start
    for name in names:
        cursor = align_up(cursor, alignment)
        table[name] = (cursor, sizes[name])
        cursor += sizes[name]
    return table, cursor


class OperatorSequence:
    """A runlist with its buffers laid out.

    `buffer_sizes` names buffers with a host address of their own (weights,
    states) and sizes buffers only ever used through slices.
    `buffer_offsets` replaces the planner's relative offsets for the planned
    intermediates. `plan_scratch=False` packs everything back to back. With
    `arena` (an `iron.alloc.ArenaPlan` shared by several sequences) the
    scratch buffers are placed in it instead: `residents` maps the names
    that must keep one offset forever (weights, states) to storage keys.
    """

    def __init__(
        self,
        name: str,
        runlist,
        inputs,
        outputs,
        buffer_sizes: dict[str, int] | None = None,
        buffer_offsets: dict[str, int] | None = None,
        plan_scratch: bool = True,
        *,
        device: Device | None = None,
        alignment: int | None = None,
        arena: ArenaPlan | None = None,
        residents: dict[str, object] | None = None,
    ) -> None:
        self.name = name
        self.device = device
        self.alignment = alignment or max(
            ALIGNMENT, device.coherence_granule if device else ALIGNMENT
        )
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.buffer_sizes = dict(buffer_sizes or {})
        self.steps = [self._step(i, entry) for i, entry in enumerate(runlist)]
        self.sizes = self._sizes()
        self._check_io()
        self.pinned = set(self.buffer_sizes) | {
            a.base for s in self.steps for a in s.args if isinstance(a, View)
        }
        self._check_reads_are_written()
        self.residents = dict(residents or {})
        self.in_arena = arena is not None
        if arena is not None:
            self.layout, self._report = self._place_in_arena(arena, self.residents)
        else:
            self.layout, self._report = self._plan(plan_scratch, buffer_offsets)
        log.debug("%s", self._report)

    @classmethod
    def from_graph(
        cls, g: Graph, name: str | None = None, inputs=None, outputs=None, **kwargs
    ) -> OperatorSequence:
        """The sequence a capture recorded: inputs and outputs inferred unless
        given; weights, states and sliced buffers keep host addresses."""
        inferred_inputs, inferred_outputs = g.infer_io()
        sizes = {**g.pinned(), **kwargs.pop("buffer_sizes", {})}
        return cls(
            name or g.name,
            g.steps,
            inferred_inputs if inputs is None else inputs,
            inferred_outputs if outputs is None else outputs,
            buffer_sizes=sizes,
            **kwargs,
        )

    # ---- validation ----

    def _step(self, index: int, entry) -> Step:
        if isinstance(entry, Step):
            op, refs, bindings = entry.op, entry.args, entry.bindings
        elif isinstance(entry, (tuple, list)) and entry and isinstance(entry[0], Operator):
            op, bindings = entry[0], {}
            refs = tuple(self._ref(index, op, r) for r in entry[1:])
        else:
            raise TypeError(
                f"{self.name} step {index}: a runlist entry is (Operator, *buffers) or a Step, got {entry!r}"
            )
        if self.device is not None:
            try:
                op = op.resolve(self.device)
            except OperatorError as error:
                raise LayoutError(f"{self.name} step {index}: {error}") from error
        specs = op.arg_specs()
        if len(refs) != len(specs):
            raise TypeError(
                f"{self.name} step {index} ({type(op).__name__}): {len(refs)} buffer names for "
                f"{len(specs)} arg specs ({', '.join(s.name for s in specs)})"
            )
        return Step(op, tuple(refs), tuple(specs), bindings)

    def _ref(self, index: int, op: Operator, ref) -> str | View:
        """A buffer name or view; ``"base[a:b]"`` text becomes a `View` here, once."""
        if isinstance(ref, View):
            return ref
        if not isinstance(ref, str) or not ref:
            raise TypeError(
                f"{self.name} step {index} ({type(op).__name__}): a buffer is a name or a View, got {ref!r}"
            )
        try:
            return View.parse(ref)
        except ValueError as error:
            raise LayoutError(f"{self.name} step {index} ({type(op).__name__}): {error}") from error

    def _sizes(self) -> dict[str, int]:
        sizes = dict(self.buffer_sizes)
        slices = []
        for index, step in enumerate(self.steps):
            for name, spec in zip(step.args, step.specs):
                if isinstance(name, View):
                    slices.append((index, step, name, spec))
                    continue
                if sizes.setdefault(name, spec.nbytes) != spec.nbytes:
                    raise LayoutError(
                        f"{self.name} step {index} ({type(step.op).__name__}): buffer {name!r} is used as "
                        f"{spec.nbytes} B here ({spec.name} {spec.shape}) but is {sizes[name]} B elsewhere"
                    )
        for index, step, view, spec in slices:
            where = f"{self.name} step {index} ({type(step.op).__name__})"
            if view.base not in sizes:
                raise LayoutError(
                    f"{where}: slice '{view}' of unknown buffer {view.base!r} (give its size in buffer_sizes)"
                )
            if view.stop > sizes[view.base]:
                raise LayoutError(
                    f"{where}: slice '{view}' is outside {view.base!r} ({sizes[view.base]} B)"
                )
            if view.nbytes != spec.nbytes:
                raise LayoutError(
                    f"{where}: slice '{view}' is {view.nbytes} B but {spec.name} needs {spec.nbytes} B"
                )
        return sizes

    def _check_io(self) -> None:
        touched = {base_of(a) for s in self.steps for a in s.args}
        for role, names in (("input", self.inputs), ("output", self.outputs)):
            for name in names:
                if name not in touched:
                    raise LayoutError(f"{self.name}: {role} {name!r} is not touched by any step")
        both = set(self.inputs) & set(self.outputs)
        if both:
            raise LayoutError(
                f"{self.name}: {', '.join(sorted(both))} cannot be both input and output"
            )

    def _check_reads_are_written(self) -> None:
        """An intermediate read before any step writes it would read garbage."""
        host = set(self.inputs) | self.pinned
        written: set[str] = set()
        for index, step in enumerate(self.steps):
            for name in step.reads:
                base = base_of(name)
                if base not in host and base not in written:
                    raise LayoutError(
                        f"{self.name} step {index} ({type(step.op).__name__}): reads '{name}', which is not an "
                        "input, weight or state and which no earlier step writes"
                    )
            written.update(base_of(n) for n in step.writes)

    # ---- planning ----

    def accesses(self) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """(reads, writes) buffer names per step, a view counting as its base."""
        return [(tuple(map(base_of, s.reads)), tuple(map(base_of, s.writes))) for s in self.steps]

    def _scratch_names(self) -> list[str]:
        host = set(self.inputs) | set(self.outputs)
        seen: dict[str, None] = {}
        for name in self.buffer_sizes:
            seen.setdefault(name)
        for step in self.steps:
            for name in step.args:
                seen.setdefault(base_of(name))
        return [n for n in seen if n not in host]

    def _plan(self, plan_scratch: bool, buffer_offsets):
        a = self.alignment
        inputs, _ = _pack(self.inputs, self.sizes, a)
        outputs, _ = _pack(self.outputs, self.sizes, a)
        scratch_names = self._scratch_names()
        ranges = live_ranges(
            self.accesses(), pinned=set(self.inputs) | set(self.outputs) | self.pinned
        )
        planned = [n for n in scratch_names if n in ranges] if plan_scratch else []
        fixed = [n for n in scratch_names if n not in planned]
        scratch, cursor = _pack(fixed, self.sizes, a)
        base = align_up(cursor, a)
        naive = _pack(planned, self.sizes, a)[1]
        if planned:
            if buffer_offsets is not None:
                missing = [n for n in planned if n not in buffer_offsets]
                if missing:
                    raise LayoutError(
                        f"{self.name}: buffer_offsets has no offset for {', '.join(missing)}"
                    )
                offsets = {n: buffer_offsets[n] for n in planned}
            else:
                offsets = place(
                    {n: ranges[n] for n in planned}, {n: self.sizes[n] for n in planned}, a
                ).offsets
            for name in planned:
                scratch[name] = (base + offsets[name], self.sizes[name])
        used = max((scratch[n][0] + self.sizes[n] for n in planned), default=base) - base
        self.ranges = {n: ranges[n] for n in planned}
        self.plan = Plan({n: scratch[n][0] for n in planned}, max(base + used, cursor), alignment=a)
        bound = peak_live_bytes(self.ranges, self.sizes) if planned else 0
        report = f"{self.name}: scratch {naive} B -> {used} B, lower bound {bound} B (plus {cursor} B pinned)"
        return Layout(inputs, outputs, scratch), report

    def _place_in_arena(self, arena: ArenaPlan, residents: dict[str, object]):
        self.ranges, self.plan = {}, None  # the arena plans with touch ranges across images
        a = self.alignment
        inputs, _ = _pack(self.inputs, self.sizes, a)
        outputs, _ = _pack(self.outputs, self.sizes, a)
        names = set(self._scratch_names())
        steps = [
            ([n for n in reads if n in names], [n for n in writes if n in names])
            for reads, writes in self.accesses()
        ]
        before = arena.size
        offsets = arena.place_image(
            steps,
            {n: self.sizes[n] for n in names},
            {n: k for n, k in residents.items() if n in names},
        )
        scratch = {n: (offsets[n], self.sizes[n]) for n in self._scratch_names()}
        transient = sum(align_up(self.sizes[n], a) for n in names if n not in residents)
        report = (
            f"{self.name}: arena {before} B -> {arena.size} B "
            f"({len(arena.residents)} residents; this image's transients would take {transient} B unshared)"
        )
        return Layout(inputs, outputs, scratch), report

    @property
    def host_addressed(self) -> set[str]:
        """Scratch buffers the host reads or writes by name (weights, states;
        outside an arena also sliced buffers): never poisoned or reused."""
        if self.in_arena:
            return set(self.residents)
        return {n for n in self.layout.scratch if n in self.pinned}

    def memory_report(self) -> str:
        """What planning saved, e.g. ``scratch 6144 B -> 4096 B, lower bound 4096 B``."""
        return self._report

    def __repr__(self) -> str:
        return f"OperatorSequence({self.name!r}, {len(self.steps)} steps, inputs={self.inputs}, outputs={self.outputs})"
