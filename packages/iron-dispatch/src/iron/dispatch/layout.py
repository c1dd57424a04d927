"""Where every buffer of a runlist lives, in one of three arenas: ``input``
and ``output`` (host I/O, packed in order) and ``scratch``.

Two ways to lay out scratch, each a function of a `Runlist` that returns
``(Layout, report, plan | None)``:

- `plan_layout`, a runlist on its own: buffers with a host address of their
  own (explicitly sized ones: weights, states, anything viewed) are packed
  first; intermediates are planned by liveness with `iron.alloc.place` and
  rebased past them, so a planned buffer can never land on a weight. The
  plan is the `iron.alloc.Plan` of the intermediates (absolute offsets).
- `arena_layout`, one of several runlists sharing an `iron.alloc.ArenaPlan`
  (the versions of one graph function): residents (weights, states) keep
  one offset forever and transients reuse other runlists' bytes.

Every offset is aligned to the device's coherence granule (64 B). Every
scratch layout is proven by `iron.alloc.check` before it is used: each
buffer aligned and inside the arena, no two sharing a byte while both are
live, with pinned buffers and residents (every version's) live throughout.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import attrs

from iron.alloc import (
    ArenaPlan,
    LiveRange,
    Plan,
    align_up,
    check,
    peak_live_bytes,
    place,
    touch_ranges,
)
from iron.core import View
from iron.core.view import base_of
from iron.dispatch.runlist import LayoutError, Runlist

ALIGNMENT = 64

Table = dict[str, tuple[int, int]]


@attrs.frozen
class Layout:
    """Per arena, buffer name -> (offset, nbytes); `host_addressed` are the
    scratch buffers the host reads or writes by name (weights, states;
    outside an arena also viewed buffers): never poisoned, never reused."""

    input: Table
    output: Table
    scratch: Table
    host_addressed: frozenset[str] = frozenset()

    @property
    def arenas(self) -> dict[str, Table]:
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


def _alignment(runlist: Runlist, alignment: int | None = None) -> int:
    """`alignment`, else the device's coherence granule (at least 64 B)."""
    granule = runlist.device.coherence_granule if runlist.device else ALIGNMENT
    return alignment or max(ALIGNMENT, granule)


def _pack(names, sizes, alignment: int, start: int = 0) -> tuple[Table, int]:
    table, cursor = {}, start
    for name in names:
        cursor = align_up(cursor, alignment)
        table[name] = (cursor, sizes[name])
        cursor += sizes[name]
    return table, cursor


def _host_io(runlist: Runlist, alignment: int) -> tuple[Table, Table]:
    return (
        _pack(runlist.inputs, runlist.sizes, alignment)[0],
        _pack(runlist.outputs, runlist.sizes, alignment)[0],
    )


def plan_layout(
    runlist: Runlist,
    *,
    plan_scratch: bool = True,
    buffer_offsets: Mapping[str, int] | None = None,
    alignment: int | None = None,
) -> tuple[Layout, str, Plan | None]:
    """The layout of a runlist on its own. `buffer_offsets` replaces the
    planner's offsets (relative to the planned region) of the intermediates;
    `plan_scratch=False` packs every buffer back to back (and gives no plan).
    The report reads ``chain: scratch 6144 B -> 4096 B, lower bound 4096 B
    (plus 0 B pinned)``."""
    a = _alignment(runlist, alignment)
    sizes = runlist.sizes
    scratch_names = runlist.scratch_names()
    ranges = runlist.live_ranges() if plan_scratch else {}
    planned = [n for n in scratch_names if n in ranges]
    scratch, cursor = _pack([n for n in scratch_names if n not in ranges], sizes, a)
    base = align_up(cursor, a)
    if buffer_offsets is not None:
        missing = [n for n in planned if n not in buffer_offsets]
        if missing:
            raise LayoutError(
                f"{runlist.name}: buffer_offsets has no offset for {', '.join(missing)}"
            )
        offsets = {n: buffer_offsets[n] for n in planned}
    elif planned:
        offsets = place({n: ranges[n] for n in planned}, sizes, a).offsets
    else:
        offsets = {}
    for name in planned:
        scratch[name] = (base + offsets[name], sizes[name])
    used = max((scratch[n][0] + sizes[n] for n in planned), default=base) - base
    naive = _pack(planned, sizes, a)[1]
    bound = peak_live_bytes({n: ranges[n] for n in planned}, sizes)
    report = (
        f"{runlist.name}: scratch {naive} B -> {used} B, lower bound {bound} B "
        f"(plus {cursor} B pinned)"
    )
    plan = (
        Plan({n: scratch[n][0] for n in planned}, max(base + used, cursor), alignment=a)
        if plan_scratch
        else None
    )
    whole = LiveRange(0, max(len(runlist.steps) - 1, 0))
    _prove(scratch, {n: ranges.get(n, whole) for n in scratch}, max(base + used, cursor), a)
    inputs, outputs = _host_io(runlist, a)
    host_addressed = frozenset(n for n in scratch if n in runlist.pinned)
    return Layout(inputs, outputs, scratch, host_addressed), report, plan


def arena_layout(
    runlist: Runlist,
    arena: ArenaPlan,
    residents: Mapping[str, Hashable],
    *,
    alignment: int | None = None,
) -> tuple[Layout, str, None]:
    """The layout of one of several runlists in the shared `arena`.
    `residents` maps the scratch buffers that keep one offset forever
    (weights, states) to their storage keys; every other scratch buffer is
    a transient, live from its first touch to its last. The arena plans
    across runlists, so there is no plan of this runlist's own. The report
    reads ``block: arena 0 B -> 8192 B (2 residents; this image's transients
    would take 4096 B unshared)``."""
    a = _alignment(runlist, alignment)
    names = runlist.scratch_names()
    scratch_set = set(names)
    steps = [
        ([n for n in reads if n in scratch_set], [n for n in writes if n in scratch_set])
        for reads, writes in runlist.accesses()
    ]
    before = arena.size
    offsets = arena.place_image(
        steps,
        {n: runlist.sizes[n] for n in names},
        {n: k for n, k in residents.items() if n in scratch_set},
    )
    scratch = {n: (offsets[n], runlist.sizes[n]) for n in names}
    _prove_arena(scratch, steps, residents, arena, a)
    transient = sum(align_up(runlist.sizes[n], a) for n in names if n not in residents)
    report = (
        f"{runlist.name}: arena {before} B -> {arena.size} B ({len(arena.residents)} residents; "
        f"this image's transients would take {transient} B unshared)"
    )
    inputs, outputs = _host_io(runlist, a)
    return Layout(inputs, outputs, scratch, frozenset(residents) & scratch_set), report, None


def _prove(scratch: Table, ranges: dict[str, LiveRange], size: int, alignment: int) -> None:
    """`iron.alloc.check` over a whole scratch table (`OverlapError` names
    the buffers): nothing placed by the planner is trusted unchecked."""
    plan = Plan({n: o for n, (o, _) in scratch.items()}, size, alignment=alignment)
    check(plan, ranges, {n: nbytes for n, (_, nbytes) in scratch.items()})


def _prove_arena(scratch: Table, steps, residents, arena: ArenaPlan, alignment: int) -> None:
    """One image in the shared arena, checked with every resident of every
    version (live throughout, inside the arena) beside its transients."""
    whole = LiveRange(0, max(len(steps) - 1, 0))
    keys = {k: n for n, k in residents.items() if n in scratch}  # one name per storage
    table = {n: scratch[n] for n in scratch if n not in residents or keys[residents[n]] == n}
    ranges = touch_ranges(steps, [n for n in table if n not in residents])
    for key, (offset, nbytes) in arena.residents.items():
        name = keys.get(key, f"<resident {key!r}>")
        table[name] = (offset, nbytes)
        ranges[name] = whole
    _prove(table, ranges, arena.size, alignment)
