"""Runlists: the steps a program runs, each with the buffers it uses,
checked once so that everything downstream (layout, images, backends) can
trust them.

An entry is a recorded `Step` (it carries its per-call bindings) or
``(operator, *buffers)``, one buffer per arg spec in spec order: a name, or
a `View` of a byte range of a named buffer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from iron.alloc import LiveRange, live_ranges
from iron.core import Device, Operator, OperatorError, View
from iron.core.capture import Graph, Step
from iron.core.view import base_of


class LayoutError(ValueError):
    """A runlist whose buffers cannot be laid out (sizes, slices, I/O)."""


class Runlist:
    """A validated runlist.

    `inputs` and `outputs` are the host's buffers; `buffer_sizes` names
    buffers with a host address of their own (weights, states) and sizes
    buffers only ever used through views. With `device`, every operator is
    resolved on it. Attributes: `name`, `steps` (`Step`s, resolved), `inputs`,
    `outputs`, `sizes` (every buffer's bytes), `pinned` (buffers that keep a
    host address: sized explicitly or viewed), `device`.

    Refused with `LayoutError` naming the step and the buffer: a buffer used
    with two sizes, a view of an unknown buffer or outside its base, an input
    or output no step touches, a step that reads an intermediate no earlier
    step wrote; with `TypeError`: an entry that is not a `Step` or
    ``(Operator, *buffers)``, a buffer that is neither a plain name nor a
    `View`, a buffer count that does not match the arg specs.
    """

    def __init__(
        self,
        name: str,
        entries: Iterable,
        inputs: Iterable[str],
        outputs: Iterable[str],
        *,
        buffer_sizes: Mapping[str, int] | None = None,
        device: Device | None = None,
    ) -> None:
        self.name, self.device = name, device
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        explicit = dict(buffer_sizes or {})
        self.steps = tuple(self._step(i, entry) for i, entry in enumerate(entries))
        self.sizes = self._sizes(explicit)
        self._check_io()
        self.pinned = frozenset(explicit) | {
            a.base for s in self.steps for a in s.args if isinstance(a, View)
        }
        self._check_reads_are_written()
        self._explicit = tuple(explicit)

    @classmethod
    def from_graph(
        cls, g: Graph, name: str | None = None, inputs=None, outputs=None, **kwargs
    ) -> Runlist:
        """The runlist a capture recorded: inputs and outputs inferred unless
        given; weights, states and viewed buffers keep host addresses."""
        inferred_inputs, inferred_outputs = g.infer_io()
        return cls(
            name or g.name,
            g.steps,
            inferred_inputs if inputs is None else inputs,
            inferred_outputs if outputs is None else outputs,
            buffer_sizes={**g.pinned(), **kwargs.pop("buffer_sizes", {})},
            **kwargs,
        )

    def _step(self, index: int, entry) -> Step:
        if isinstance(entry, Step):
            op, refs, bindings = entry.op, entry.args, entry.bindings
        elif isinstance(entry, (tuple, list)) and entry and isinstance(entry[0], Operator):
            op, refs, bindings = entry[0], tuple(entry[1:]), {}
        else:
            raise TypeError(
                f"{self.name} step {index}: a runlist entry is (Operator, *buffers) or a Step, got {entry!r}"
            )
        where = f"{self.name} step {index} ({type(op).__name__})"
        for ref in refs:
            plain = isinstance(ref, str) and ref and "[" not in ref
            if not plain and not isinstance(ref, View):
                raise TypeError(
                    f"{where}: a buffer is a plain name or a View, got {ref!r} "
                    "(OperatorSequence also reads 'base[a:b]' text)"
                )
        if self.device is not None:
            try:
                op = op.resolve(self.device)
            except OperatorError as error:
                raise LayoutError(f"{self.name} step {index}: {error}") from error
        specs = op.arg_specs()
        if len(refs) != len(specs):
            raise TypeError(
                f"{where}: {len(refs)} buffer names for {len(specs)} arg specs "
                f"({', '.join(s.name for s in specs)})"
            )
        return Step(op, tuple(refs), tuple(specs), bindings)

    def _sizes(self, explicit: dict[str, int]) -> dict[str, int]:
        sizes = dict(explicit)
        views = []
        for index, step in enumerate(self.steps):
            for ref, spec in zip(step.args, step.specs):
                if isinstance(ref, View):
                    views.append((index, step, ref, spec))
                elif sizes.setdefault(ref, spec.nbytes) != spec.nbytes:
                    raise LayoutError(
                        f"{self.name} step {index} ({type(step.op).__name__}): buffer {ref!r} is used as "
                        f"{spec.nbytes} B here ({spec.name} {spec.shape}) but is {sizes[ref]} B elsewhere"
                    )
        for index, step, view, spec in views:
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
        for index, (reads, writes) in enumerate(self.accesses()):
            for ref, base in zip(self.steps[index].reads, reads):
                if base not in host and base not in written:
                    raise LayoutError(
                        f"{self.name} step {index} ({type(self.steps[index].op).__name__}): reads "
                        f"'{ref}', which is not an input, weight or state and which no earlier step writes"
                    )
            written.update(writes)

    # ---- what planning reads ----

    def accesses(self) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """(reads, writes) buffer names per step, a view counting as its base."""
        return [(tuple(map(base_of, s.reads)), tuple(map(base_of, s.writes))) for s in self.steps]

    def scratch_names(self) -> list[str]:
        """Every buffer that is neither a host input nor a host output, the
        explicitly sized ones first, then in order of first use."""
        host = set(self.inputs) | set(self.outputs)
        seen = dict.fromkeys(self._explicit)
        for step in self.steps:
            seen.update(dict.fromkeys(map(base_of, step.args)))
        return [n for n in seen if n not in host]

    def live_ranges(self) -> dict[str, LiveRange]:
        """The poolable buffers (never host I/O or pinned) and their ranges."""
        pinned = set(self.inputs) | set(self.outputs) | self.pinned
        return live_ranges(self.accesses(), pinned=pinned)

    def __repr__(self) -> str:
        return (
            f"Runlist({self.name!r}, {len(self.steps)} steps, inputs={list(self.inputs)}, "
            f"outputs={list(self.outputs)})"
        )
