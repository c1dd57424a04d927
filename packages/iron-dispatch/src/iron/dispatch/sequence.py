"""OperatorSequence: a hand-written (or recorded) runlist laid out on its
own, the quickest way to run one. It is where ``"base[a:b]"`` text becomes
a `View`, once; everything past it reads typed buffers."""

from __future__ import annotations

import logging

from iron.core import Device, View
from iron.core.capture import Graph
from iron.dispatch.layout import plan_layout
from iron.dispatch.runlist import LayoutError, Runlist

log = logging.getLogger("iron.dispatch")


class OperatorSequence:
    """`runlist` (a `Runlist`) and its standalone `layout`, `plan` and
    report (`plan_layout`). Entries are ``(operator, *buffers)`` or recorded
    `Step`s; a buffer is a name, a `View` or ``"base[a:b]"`` text (bytes a..b
    of buffer ``base``). `buffer_sizes` names buffers with a host address of
    their own (weights, states) and sizes buffers only ever used through
    views; `buffer_offsets` and `plan_scratch` go to `plan_layout`."""

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
    ) -> None:
        entries = [_read_text(name, i, entry) for i, entry in enumerate(runlist)]
        runlist = Runlist(name, entries, inputs, outputs, buffer_sizes=buffer_sizes, device=device)
        self._lay_out(runlist, plan_scratch, buffer_offsets, alignment)

    @classmethod
    def from_graph(
        cls,
        g: Graph,
        name: str | None = None,
        inputs=None,
        outputs=None,
        *,
        buffer_sizes: dict[str, int] | None = None,
        device: Device | None = None,
        buffer_offsets: dict[str, int] | None = None,
        plan_scratch: bool = True,
        alignment: int | None = None,
    ) -> OperatorSequence:
        """The sequence a capture recorded (`Runlist.from_graph`), laid out."""
        runlist = Runlist.from_graph(
            g, name, inputs, outputs, buffer_sizes=buffer_sizes or {}, device=device
        )
        sequence = object.__new__(cls)  # the runlist is made: skip __init__'s reading of text
        sequence._lay_out(runlist, plan_scratch, buffer_offsets, alignment)
        return sequence

    def _lay_out(self, runlist: Runlist, plan_scratch, buffer_offsets, alignment) -> None:
        self.runlist = runlist
        self.layout, self._report, self.plan = plan_layout(
            runlist, plan_scratch=plan_scratch, buffer_offsets=buffer_offsets, alignment=alignment
        )
        log.debug("%s", self._report)

    @property
    def name(self) -> str:
        return self.runlist.name

    def memory_report(self) -> str:
        """What planning saved, e.g. ``scratch 6144 B -> 4096 B, lower bound 4096 B``."""
        return self._report

    def __repr__(self) -> str:
        return f"OperatorSequence({self.runlist!r})"


def _read_text(name: str, index: int, entry):
    """`entry` with its ``"base[a:b]"`` buffers read as `View`s."""
    if not isinstance(entry, (tuple, list)) or not entry:
        return entry  # Runlist says what is wrong with it
    op, *buffers = entry
    try:
        return (op, *(View.parse(b) if isinstance(b, str) else b for b in buffers))
    except ValueError as error:
        raise LayoutError(f"{name} step {index} ({type(op).__name__}): {error}") from error
