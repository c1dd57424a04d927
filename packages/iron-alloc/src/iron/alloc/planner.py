"""Offsets for buffers in one arena: greedy by size with best fit, and an
anytime search over several greedy orders (the default strategy).

Plain greedy is Pisarchyk & Lee's Greedy by Size for Offset Calculation, as
in TFLite's GPU delegate: largest buffer first (ties by begin, then name),
each into the smallest gap left by the already placed buffers that share a
step with it, else on top. It is fast and lands within a few per mille of the
lower bound on real traces, but 30-40% above it on hard synthetic cases. No
single order wins everywhere, so the search runs several orders (size,
distance from the peak step, lifetime, conflict, begin, end, area; with best
fit and first fit), lays each order out bottom-up on a skyline (see
`skyline.py`: far better on hard synthetic cases), compacts layouts (see
`_Search.compact`), then spends some rounds promoting the top layer of the
best greedy orders and trying jittered orders, and keeps the smallest arena.

The search is anytime: candidates come cheapest and likeliest first (see
`_Search._candidates`), and it stops when the next pass would overrun its
budget, counted in buffer placements rather than seconds so that the same
input and budget always give the same plan, or when an arena is within
`gap` (0.1% by default) of the lower bound (beside any fixed allocations).
Plain greedy is its first candidate and always runs, and a later one must
be strictly smaller to replace it, so the search is never worse than
"greedy".
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from .greedy import greedy_offsets
from .liveness import LiveRange, load_profile
from .skyline import skyline_offsets

STRATEGIES = ("auto", "greedy", "best")
DEFAULT_BUDGET = 120_000
"""Buffer placements `strategy="auto"` may make; a pass places every buffer once."""
DEFAULT_GAP = 0.001
"""`strategy="auto"` stops once an arena is within this share above the
smallest any arena can be: the last per mille costs the most passes and
saves the fewest bytes (a graph's weights, fixed in its arena, leave
nothing else to win)."""
ORDERS = ("size", "peak", "lifetime", "conflict", "begin", "end", "area")
"""The greedy orders of the search, in the order it tries them."""
BEST_FULL_LIMIT = 5000
"""Above this many buffers the search tries only `_LARGE_ORDERS` after size and peak."""
BEST_WORK = 20_000_000
"""Improvement rounds for n buffers: min(96, BEST_WORK // n**2)."""
_LARGE_ORDERS = ("lifetime", "conflict")
_IMPROVE_ROUNDS = 96
_IMPROVE_STARTS = 3  # the best orders that the improvement rounds start from
_COMPACT_PASSES = 4
_PROMOTION = (0.25, 0.5, 1.0)  # how far up a top buffer moves, as a share of its position


class Allocation(NamedTuple):
    """`size` bytes at `offset` held by `name`; live at every step when fixed."""

    name: str
    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True)
class Plan:
    """Where each buffer lives in one arena of `size` bytes.

    `offsets[name]` is the byte offset of each planned buffer, a multiple of
    `alignment`; `size` is the arena size (the highest end of any planned or
    fixed allocation, 0 when empty); `fixed` are the allocations the plan was
    made around; `strategy` names the order and fit that produced it;
    `placements` counts the buffer placements spent finding it.
    """

    offsets: dict[str, int]
    size: int
    alignment: int = 64
    fixed: tuple[Allocation, ...] = ()
    strategy: str = "size/best-fit"
    placements: int = 0


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of `alignment` that is >= `value`."""
    return -(-value // alignment) * alignment


def _index(function: str, what: str, value: object) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{function}: {what} must be an int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{function}: {what} must be an int, got {type(value).__name__}") from None


def place(
    ranges: Mapping[str, LiveRange],
    sizes: Mapping[str, int],
    alignment: int = 64,
    fixed: Iterable[Allocation] = (),
    strategy: str = "auto",
    budget: int | None = DEFAULT_BUDGET,
    gap: float = DEFAULT_GAP,
) -> Plan:
    """Give every buffer in `ranges` an offset so that no two buffers sharing
    a step share a byte, in an arena as small as the strategy finds.

    `sizes` must hold a size (int >= 0) for every name in `ranges` (extra
    names are ignored). Offsets are multiples of `alignment` (int >= 1).
    `fixed` allocations are obstacles live at every step (they keep their
    offsets and count towards `plan.size`); their names must not be planned.
    A buffer of size 0 gets offset 0 and takes no bytes.

    `strategy`: "greedy" is plain greedy by size with best fit; "auto"
    (default) runs the search described in this module for at most `budget`
    buffer placements (int >= 0, or None for no limit; a pass places every
    buffer once and the first pass, plain greedy, always runs) and keeps the
    smallest arena, never larger than "greedy"'s, stopping early once an
    arena is at most `gap` (a share >= 0) above the smallest any arena can
    be (the fixed allocations' bytes plus the most bytes live at one step);
    "best" is "auto" with neither a limit nor a gap. Every strategy is
    deterministic: the same input, budget and gap give the same offsets, and
    with gap 0 any budget the search does not use up gives the plan of
    "best". `plan.placements` is what the strategy spent.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"place: strategy must be one of {STRATEGIES}, got {strategy!r}")
    if budget is not None and _index("place", "budget", budget) < 0:
        raise ValueError(f"place: budget must be >= 0 (buffer placements) or None, got {budget}")
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not 0 <= gap < float("inf"):
        raise ValueError(f"place: gap must be a finite share >= 0, got {gap!r}")
    alignment = _index("place", "alignment", alignment)
    if alignment < 1:
        raise ValueError(f"place: alignment must be >= 1, got {alignment}")
    names = sorted(ranges)
    live = [ranges[name] for name in names]
    size_list = [sizes.get(name) for name in names]
    # a quick pass for the common case (LiveRanges, plain ints); the loop names any culprit
    if not (
        all(type(r) is LiveRange for r in live)
        and all(type(s) is int for s in size_list)
        and min(size_list, default=0) >= 0
    ):
        for name, r, s in zip(names, live, size_list, strict=True):
            if not isinstance(r, LiveRange):
                raise TypeError(
                    f"place: range of {name!r} must be a LiveRange, got {type(r).__name__}"
                )
            if name not in sizes:
                raise ValueError(f"place: no size given for buffer {name!r}")
            if _index("place", f"size of {name!r}", s) < 0:
                raise ValueError(f"place: size of {name!r} must be >= 0, got {s}")
    fixed = tuple(fixed)
    for allocation in fixed:
        if not isinstance(allocation, Allocation):
            raise TypeError(f"place: fixed entries must be Allocation, got {allocation!r}")
        if allocation.name in ranges:
            raise ValueError(f"place: fixed allocation {allocation.name!r} is also in ranges")
        offset = _index("place", f"offset of fixed {allocation.name!r}", allocation.offset)
        if offset < 0 or _index("place", f"size of fixed {allocation.name!r}", allocation.size) < 0:
            raise ValueError(
                f"place: fixed allocation {allocation!r} has a negative offset or size"
            )

    n = len(names)
    begin = np.fromiter(map(operator.attrgetter("begin"), live), np.int64, n)
    end = np.fromiter(map(operator.attrgetter("end"), live), np.int64, n)
    size = np.fromiter(map(operator.index, size_list), np.int64, n)
    fixed_offset = np.array([f.offset for f in fixed if f.size > 0], np.int64)
    fixed_end = np.array([f.end for f in fixed if f.size > 0], np.int64)
    fixed_top = max((f.end for f in fixed), default=0)

    auto = strategy == "auto"
    search = _Search(
        begin, end, size, alignment, fixed_offset, fixed_end,
        budget if auto else None, gap if auto else 0.0,
    )  # fmt: skip
    if strategy == "greedy":
        search.run("size", best_fit=True)
    else:
        search.search()
    offsets = search.best_offsets
    top = int((offsets + size).max()) if n else 0
    return Plan(
        offsets=dict(zip(names, offsets.tolist(), strict=True)),
        size=max(top, fixed_top),
        alignment=alignment,
        fixed=fixed,
        strategy=search.best_label,
        placements=search.placements,
    )


def _fit(best_fit: bool) -> str:
    return "best-fit" if best_fit else "first-fit"


class _SearchOver(Exception):
    """The next pass would overrun the budget, or the lower bound is reached."""


class _Search:
    """Greedy passes over one instance, remembering the smallest arena seen.

    Each pass (greedy, compaction or skyline) places every non-empty buffer
    once and is charged that many placements. The first pass always runs; a
    later one ends the search instead when it would overrun `budget` (None: no
    limit) or when the smallest arena is already within `gap` of the
    smallest any can be (`_floor`: the lower bound, beside any fixed
    allocations).
    """

    def __init__(self, begin, end, size, alignment, fixed_offset, fixed_end, budget=None, gap=0.0):
        self.begin, self.end, self.size = begin, end, size
        self.alignment = alignment
        self.fixed = (fixed_offset, fixed_end)
        self.name_rank = np.arange(len(size))  # names are sorted, so index = name order
        self.nonempty = size > 0
        self.n = int(self.nonempty.sum())
        self.budget, self.gap = budget, gap
        self.placements = 0
        self.best_offsets = np.zeros(len(size), np.int64)
        self.best_top = None
        self.best_label = "size/best-fit"
        self._orders: dict[str, np.ndarray] = {}
        self._conflicts = None

    @cached_property
    def _floor(self) -> int:
        """No arena is smaller: the fixed allocations are live at every step,
        so the bytes they cover plus the most bytes live at one step, and
        never below the fixed allocations' top."""
        fixed_offset, fixed_end = self.fixed
        covered, reach = 0, 0
        for offset, end in sorted(zip(fixed_offset.tolist(), fixed_end.tolist())):
            covered += max(0, end - max(offset, reach))
            reach = max(reach, end)
        return max(reach, covered + self._peak[0])

    @cached_property
    def _peak(self) -> tuple[int, int]:
        """The lower bound (most bytes live at one step) and the first step with it."""
        times, live = load_profile(self.begin, self.end, self.size)
        if len(live) == 0:
            return 0, 0
        return int(live.max()), int(times[np.argmax(live)])

    def order(self, label: str) -> np.ndarray:
        """The non-empty buffers in the order `label` names (one of `ORDERS`):
        by its key, then largest first, then by begin (begin: the reverse),
        then by name, so every order is total."""
        if label not in self._orders:
            begin, end, size, rank = self.begin, self.end, self.size, self.name_rank
            life = end - begin + 1
            keys = {
                "size": lambda: (),
                "peak": lambda: (
                    np.maximum(0, np.maximum(begin - self._peak[1], self._peak[1] - end)),
                ),
                "lifetime": lambda: (-life,),
                "conflict": lambda: (-self.conflicts(),),
                "end": lambda: (-end,),
                "area": lambda: (-size * life,),
            }
            if label == "begin":
                key = (rank, -size, begin)
            else:
                key = (rank, begin, -size, *keys[label]())
            self._orders[label] = self._nonempty(np.lexsort(key))
        return self._orders[label]

    def _nonempty(self, order: np.ndarray) -> np.ndarray:
        return order[self.nonempty[order]]

    def conflicts(self) -> np.ndarray:
        """Bytes of every buffer sharing a step with each buffer (itself included)."""
        if self._conflicts is None:
            by_begin = np.argsort(self.begin, kind="stable")
            by_end = np.argsort(self.end, kind="stable")
            begun = np.concatenate([[0], np.cumsum(self.size[by_begin])])
            ended = np.concatenate([[0], np.cumsum(self.size[by_end])])
            started_by_my_end = np.searchsorted(self.begin[by_begin], self.end, "right")
            ended_before_me = np.searchsorted(self.end[by_end], self.begin, "left")
            self._conflicts = begun[started_by_my_end] - ended[ended_before_me]
        return self._conflicts

    def top(self, offsets: np.ndarray) -> int:
        return int((offsets + self.size).max(initial=0))

    def _charge(self) -> None:
        if self.best_top is not None and (
            (self.budget is not None and self.placements + self.n > self.budget)
            or self.best_top <= self._floor * (1 + self.gap)
        ):
            raise _SearchOver
        self.placements += self.n

    def run(self, label: str, best_fit: bool, order: np.ndarray | None = None) -> np.ndarray:
        """A greedy pass in `order`, by default the order `label` names, made
        only once the pass is charged: on a large input the budget often ends
        the search before the second pass, and the peak order needs the load
        profile."""
        self._charge()
        if order is None:
            order = self.order(label)
        return self._pass(order, best_fit, f"{label}/{_fit(best_fit)}")

    def _greedy(self, order: np.ndarray, best_fit: bool, label: str) -> np.ndarray:
        self._charge()
        return self._pass(order, best_fit, label)

    def _pass(self, order: np.ndarray, best_fit: bool, label: str) -> np.ndarray:
        offsets = greedy_offsets(
            self.begin, self.end, self.size, order, self.alignment, *self.fixed, best_fit
        )
        self._keep(offsets, label)
        return offsets

    def skyline(self, label: str, order: np.ndarray) -> np.ndarray:
        self._charge()
        offsets = skyline_offsets(
            self.begin, self.end, self.size, order, self.alignment, *self.fixed
        )
        self._keep(offsets, f"{label}/skyline")
        return offsets

    def _keep(self, offsets: np.ndarray, label: str) -> None:
        top = self.top(offsets)
        if self.best_top is None or top < self.best_top:
            self.best_top, self.best_offsets, self.best_label = top, offsets, label

    def compact(self, offsets: np.ndarray, label: str) -> int:
        """Turn the layout upside down and let every buffer fall as low as it
        fits, in order of its (flipped) offset; repeat while that helps, up to
        `_COMPACT_PASSES` times. Each buffer then only meets buffers that were
        below it, which end no higher than it starts, so nothing rises and the
        arena never grows (without fixed allocations; with them the smallest
        arena is kept anyway). Returns the smallest top reached."""
        top = self.top(offsets)
        for _ in range(_COMPACT_PASSES):
            flipped = top - (offsets + self.size)
            order = self._nonempty(np.lexsort((self.name_rank, flipped)))
            offsets = self._greedy(order, True, f"{label}, compacted")
            new_top = self.top(offsets)
            if new_top >= top:
                break
            top = new_top
        return min(top, self.top(offsets))

    def search(self) -> None:
        """Run `_candidates` until they end, the budget does or the bound is reached."""
        with suppress(_SearchOver):
            self._candidates()

    def _candidates(self) -> None:
        """Cheapest and likeliest first: plain greedy; the peak order (one
        pass, often at the bound at once); the other orders with best fit,
        each compacted. Up to `BEST_FULL_LIMIT` buffers then: the size and
        peak layouts compacted, first fit for every order and a skyline of
        every order, each compacted, and the improvement rounds."""
        plain = self.run("size", True)
        if self.n < 2:  # nothing to choose
            return
        peak = self.run("peak", True)
        large = self.n > BEST_FULL_LIMIT
        layouts = []  # (top after compaction, order label, best fit) of greedy layouts
        for label in _LARGE_ORDERS if large else ORDERS[2:]:
            offsets = self.run(label, True)
            layouts.append((self.compact(offsets, f"{label}/best-fit"), label, True))
        if large:
            return
        for label, offsets in (("size", plain), ("peak", peak)):
            layouts.append((self.compact(offsets, f"{label}/best-fit"), label, True))
        for label in ORDERS:
            offsets = self.run(label, False)
            layouts.append((self.compact(offsets, f"{label}/first-fit"), label, False))
        for label in ORDERS:
            self.compact(self.skyline(label, self.order(label)), f"{label}/skyline")
        layouts.sort(key=lambda item: item[0])  # stable: ties keep the listing order
        starts = [(label, self.order(label), fit) for _, label, fit in layouts[:_IMPROVE_STARTS]]
        self._improve(starts)

    def _improve(self, starts: list[tuple[str, np.ndarray, bool]]) -> None:
        """`min(96, BEST_WORK // n**2)` rounds, each a greedy run and its
        compaction. Even rounds take the next of `starts` (label, order, fit)
        and promote its top layer for the following visit; odd rounds sort by
        size or conflict jittered by about 30% (a seeded generator)."""
        keys = {"size": self.size.astype(float), "conflict": self.conflicts().astype(float)}
        rng = np.random.default_rng(0)
        for k in range(min(_IMPROVE_ROUNDS, BEST_WORK // (self.n * self.n))):
            if k % 2 == 0:
                slot = (k // 2) % len(starts)
                label, order, best_fit = starts[slot]
                share = _PROMOTION[(k // (2 * len(starts))) % len(_PROMOTION)]
                label = f"{label}+promoted"
                offsets = self.run(label, best_fit, order)
                starts[slot] = (starts[slot][0], self._promote(order, offsets, share), best_fit)
            else:
                key = ("size", "conflict")[(k // 2) % 2]
                noise = np.exp(0.3 * rng.standard_normal(len(self.size)))
                order = self._nonempty(np.lexsort((self.name_rank, -keys[key] * noise)))
                label, best_fit = f"{key}+jitter", (k // 4) % 2 == 0
                offsets = self.run(label, best_fit, order)
            self.compact(offsets, f"{label}/{_fit(best_fit)}")

    def _promote(self, order: np.ndarray, offsets: np.ndarray, share: float) -> np.ndarray:
        """Move the top layer earlier in `order`, each buffer by `share` of its
        position: the buffers that share a step with the ones reaching the top
        and end above the lowest of those. Placed sooner, they find lower gaps."""
        ends = offsets + self.size
        on_top = np.nonzero(ends == ends[order].max())[0]
        layer = (
            (ends > offsets[on_top].min())
            & (self.begin <= self.end[on_top].max())
            & (self.end >= self.begin[on_top].min())
        )
        moving = layer[order]
        order = order.tolist()
        for position in np.nonzero(moving)[0].tolist():
            buffer = order.pop(position)
            order.insert(max(0, int(position * (1 - share)) - 1), buffer)
        return np.array(order, np.int64)
