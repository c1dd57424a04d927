"""Offsets for buffers in one arena: greedy by size with best fit, and the
search over several greedy orders that `strategy="best"` runs.

Plain greedy is Pisarchyk & Lee's Greedy by Size for Offset Calculation, as
in TFLite's GPU delegate: largest buffer first (ties by begin, then name),
each into the smallest gap left by the already placed buffers that share a
step with it, else on top. It is fast and lands within a few per mille of the
lower bound on real traces, but 30-40% above it on hard synthetic cases. No
single order wins everywhere, so "best" runs several orders (size, conflict,
distance from the peak step, begin, end, lifetime, area; each with best fit
and first fit), also lays each order out bottom-up on a skyline (see
`skyline.py`: far better on hard synthetic cases), compacts each layout (see
`_Search.compact`), then spends some rounds promoting the top layer of the
best greedy orders and trying jittered orders, and keeps the smallest arena.
Plain greedy is its first candidate and a later one must be strictly smaller
to replace it, so "best" is never worse than "greedy".
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .greedy import greedy_offsets
from .liveness import LiveRange, load_profile
from .skyline import skyline_offsets

STRATEGIES = ("auto", "greedy", "best")
BEST_AUTO_LIMIT = 1000
"""`strategy="auto"` runs "best" up to this many buffers, plain greedy above."""
BEST_FULL_LIMIT = 5000
"""Above this many buffers "best" tries only `_LARGE_ORDERS`, no skyline, no improvement rounds."""
BEST_WORK = 20_000_000
"""Improvement rounds of "best" for n buffers: min(96, BEST_WORK // n**2)."""
_IMPROVE_ROUNDS = 96
_LARGE_ORDERS = ("size", "peak", "conflict", "lifetime")
_LARGE_COMPACTED = 2  # how many of the best layouts get compacted when there are many buffers
_LARGE_COMPACT_PASSES = 4
_IMPROVE_STARTS = 3  # the best orders that the improvement rounds start from
_COMPACT_PASSES = 3
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
    made around; `strategy` names the order and fit that produced it.
    """

    offsets: dict[str, int]
    size: int
    alignment: int = 64
    fixed: tuple[Allocation, ...] = ()
    strategy: str = "size/best-fit"


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
) -> Plan:
    """Give every buffer in `ranges` an offset so that no two buffers sharing
    a step share a byte, in an arena as small as the strategy finds.

    `sizes` must hold a size (int >= 0) for every name in `ranges` (extra
    names are ignored). Offsets are multiples of `alignment` (int >= 1).
    `fixed` allocations are obstacles live at every step (they keep their
    offsets and count towards `plan.size`); their names must not be planned.
    A buffer of size 0 gets offset 0 and takes no bytes.

    `strategy`: "greedy" is plain greedy by size with best fit; "best" runs
    the search described in this module and keeps the smallest arena (never
    larger than "greedy"); "auto" (default) is "best" for at most
    `BEST_AUTO_LIMIT` buffers and "greedy" above. Every strategy is
    deterministic: the same input gives the same offsets.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"place: strategy must be one of {STRATEGIES}, got {strategy!r}")
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

    search = _Search(begin, end, size, alignment, fixed_offset, fixed_end)
    if strategy == "auto":
        strategy = "best" if n <= BEST_AUTO_LIMIT else "greedy"
    if strategy == "greedy":
        search.run("size", search.size_order(), best_fit=True)
    else:
        search.best()
    offsets = search.best_offsets
    top = int((offsets + size).max()) if n else 0
    return Plan(
        offsets=dict(zip(names, offsets.tolist(), strict=True)),
        size=max(top, fixed_top),
        alignment=alignment,
        fixed=fixed,
        strategy=search.best_label,
    )


def _fit(best_fit: bool) -> str:
    return "best-fit" if best_fit else "first-fit"


class _Search:
    """Greedy runs over one instance, remembering the smallest arena seen."""

    def __init__(self, begin, end, size, alignment, fixed_offset, fixed_end):
        self.begin, self.end, self.size = begin, end, size
        self.alignment = alignment
        self.fixed = (fixed_offset, fixed_end)
        self.name_rank = np.arange(len(size))  # names are sorted, so index = name order
        self.nonempty = size > 0
        self.best_offsets = np.zeros(len(size), np.int64)
        self.best_top = None
        self.best_label = "size/best-fit"

    def size_order(self) -> np.ndarray:
        """Plain greedy's order: largest first, then by begin, then by name."""
        return self._nonempty(np.lexsort((self.name_rank, self.begin, -self.size)))

    def orders(self) -> dict[str, np.ndarray]:
        """Candidate orders, each made total by ending in the name order."""
        begin, end, size, rank = self.begin, self.end, self.size, self.name_rank
        life = end - begin + 1
        peak = self._peak_step()
        keys = {
            "conflict": (rank, begin, -size, -self._conflict()),
            "peak": (rank, begin, -size, np.maximum(0, np.maximum(begin - peak, peak - end))),
            "begin": (rank, -size, begin),
            "end": (rank, begin, -size, -end),
            "lifetime": (rank, begin, -size, -life),
            "area": (rank, begin, -size, -size * life),
        }
        orders = {"size": self.size_order()}
        orders.update((label, self._nonempty(np.lexsort(key))) for label, key in keys.items())
        return orders

    def _nonempty(self, order: np.ndarray) -> np.ndarray:
        return order[self.nonempty[order]]

    def _conflict(self) -> np.ndarray:
        """Bytes of every buffer sharing a step with each buffer (itself included)."""
        by_begin = np.argsort(self.begin, kind="stable")
        by_end = np.argsort(self.end, kind="stable")
        begun = np.concatenate([[0], np.cumsum(self.size[by_begin])])
        ended = np.concatenate([[0], np.cumsum(self.size[by_end])])
        started_by_my_end = np.searchsorted(self.begin[by_begin], self.end, "right")
        ended_before_me = np.searchsorted(self.end[by_end], self.begin, "left")
        return begun[started_by_my_end] - ended[ended_before_me]

    def _peak_step(self) -> int:
        """The first step at which the most bytes are live."""
        times, live = load_profile(self.begin, self.end, self.size)
        return int(times[np.argmax(live)])

    def top(self, offsets: np.ndarray) -> int:
        return int((offsets + self.size).max(initial=0))

    def run(self, label: str, order: np.ndarray, best_fit: bool) -> np.ndarray:
        offsets = greedy_offsets(
            self.begin, self.end, self.size, order, self.alignment, *self.fixed, best_fit
        )
        self._keep(offsets, f"{label}/{_fit(best_fit)}")
        return offsets

    def _keep(self, offsets: np.ndarray, label: str) -> None:
        top = self.top(offsets)
        if self.best_top is None or top < self.best_top:
            self.best_top, self.best_offsets, self.best_label = top, offsets, label

    def compact(self, offsets: np.ndarray, label: str, passes: int) -> int:
        """Turn the layout upside down and let every buffer fall as low as it
        fits, in order of its (flipped) offset; repeat while that helps. Each
        buffer then only meets buffers that were below it, which end no higher
        than it starts, so nothing rises and the arena never grows (without
        fixed allocations; with them the smallest arena is kept anyway).
        Returns the smallest top reached."""
        top = self.top(offsets)
        for _ in range(passes):
            flipped = top - (offsets + self.size)
            order = self._nonempty(np.lexsort((self.name_rank, flipped)))
            offsets = greedy_offsets(
                self.begin, self.end, self.size, order, self.alignment, *self.fixed, True
            )
            self._keep(offsets, f"{label}, compacted")
            new_top = self.top(offsets)
            if new_top >= top:
                break
            top = new_top
        return min(top, self.top(offsets))

    def best(self) -> None:
        n = int(self.nonempty.sum())
        if n < 2:  # nothing to choose
            self.run("size", self.size_order(), True)
            return
        large = n > BEST_FULL_LIMIT
        orders = self.orders()
        if large:  # the orders that win on real traces, best fit only
            orders = {label: orders[label] for label in _LARGE_ORDERS}
        tried = []  # (top, order label, order, best fit, offsets)
        for label, order in orders.items():
            for best_fit in (True,) if large else (True, False):
                offsets = self.run(label, order, best_fit)
                tried.append((self.top(offsets), label, order, best_fit, offsets))
        if large:
            tried.sort(key=lambda item: item[0])  # stable: ties keep the listing order
            for _, label, _, best_fit, offsets in tried[:_LARGE_COMPACTED]:
                self.compact(offsets, f"{label}/{_fit(best_fit)}", _LARGE_COMPACT_PASSES)
            return
        skylines = []  # the same orders, laid out bottom-up
        for label, order in orders.items():
            offsets = skyline_offsets(
                self.begin, self.end, self.size, order, self.alignment, *self.fixed
            )
            self._keep(offsets, f"{label}/skyline")
            skylines.append((self.top(offsets), label, offsets))
        skylines.sort(key=lambda item: item[0])  # stable: ties keep the listing order
        compacted = len(skylines) if n <= BEST_AUTO_LIMIT else _LARGE_COMPACTED
        for _, label, offsets in skylines[:compacted]:
            self.compact(offsets, f"{label}/skyline", _COMPACT_PASSES)
        starts = sorted(
            (
                (
                    self.compact(offsets, f"{label}/{_fit(best_fit)}", _COMPACT_PASSES),
                    label,
                    order,
                    best_fit,
                )
                for _, label, order, best_fit, offsets in tried
            ),
            key=lambda item: item[0],
        )
        self._improve(n, [item[1:] for item in starts[:_IMPROVE_STARTS]])

    def _improve(self, n: int, starts: list[tuple[str, np.ndarray, bool]]) -> None:
        """`min(96, BEST_WORK // n**2)` rounds, each a greedy run and its
        compaction. Even rounds take the next of `starts` (label, order, fit)
        and promote its top layer for the following visit; odd rounds sort by
        size or conflict jittered by about 30% (a seeded generator)."""
        keys = {"size": self.size.astype(float), "conflict": self._conflict().astype(float)}
        rng = np.random.default_rng(0)
        for k in range(min(_IMPROVE_ROUNDS, BEST_WORK // (n * n))):
            if k % 2 == 0:
                slot = (k // 2) % len(starts)
                label, order, best_fit = starts[slot]
                share = _PROMOTION[(k // (2 * len(starts))) % len(_PROMOTION)]
                label = f"{label}+promoted"
                offsets = self.run(label, order, best_fit)
                starts[slot] = (starts[slot][0], self._promote(order, offsets, share), best_fit)
            else:
                key = ("size", "conflict")[(k // 2) % 2]
                noise = np.exp(0.3 * rng.standard_normal(len(self.size)))
                order = self._nonempty(np.lexsort((self.name_rank, -keys[key] * noise)))
                label, best_fit = f"{key}+jitter", (k // 4) % 2 == 0
                offsets = self.run(label, order, best_fit)
            self.compact(offsets, f"{label}/{_fit(best_fit)}", _COMPACT_PASSES)

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
