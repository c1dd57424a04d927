"""Offsets for buffers in one arena: greedy by size with best fit, and the
search over several greedy orders that `strategy="best"` runs.

Plain greedy is Pisarchyk & Lee's Greedy by Size for Offset Calculation, as
in TFLite's GPU delegate: largest buffer first (ties by begin, then name),
each into the smallest gap left by the already placed buffers that share a
step with it, else on top. It is fast and lands within a few per mille of the
lower bound on real traces, but 30-40% above it on hard synthetic cases. No
single order wins everywhere, so "best" runs several orders (by size, by
conflict, by begin, by end, by lifetime, by area; each with best fit and
first fit), then improves the winners by promoting the buffers that reach the
top of the arena, and keeps the smallest arena. Plain greedy is its first
candidate and a later one must be strictly smaller to replace it, so "best"
is never worse than "greedy".
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .greedy import greedy_offsets
from .liveness import LiveRange

STRATEGIES = ("auto", "greedy", "best")
BEST_AUTO_LIMIT = 1000
"""`strategy="auto"` runs "best" up to this many buffers, plain greedy above."""
BEST_WORK = 100_000
"""Buffer placements the improvement rounds of "best" may spend (at most 64 rounds)."""
_IMPROVE_ROUNDS = 64
_IMPROVE_STARTS = 3  # the best orders that the improvement rounds start from
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
    for name in names:
        if not isinstance(ranges[name], LiveRange):
            raise TypeError(
                f"place: range of {name!r} must be a LiveRange, got {type(ranges[name]).__name__}"
            )
        if name not in sizes:
            raise ValueError(f"place: no size given for buffer {name!r}")
        if _index("place", f"size of {name!r}", sizes[name]) < 0:
            raise ValueError(f"place: size of {name!r} must be >= 0, got {sizes[name]}")
    fixed = tuple(fixed)
    for allocation in fixed:
        if not isinstance(allocation, Allocation):
            raise TypeError(f"place: fixed entries must be Allocation, got {allocation!r}")
        if allocation.name in ranges:
            raise ValueError(f"place: fixed allocation {allocation.name!r} is also in ranges")
        if _index("place", "fixed offset", allocation.offset) < 0 or allocation.size < 0:
            raise ValueError(
                f"place: fixed allocation {allocation!r} has a negative offset or size"
            )

    n = len(names)
    begin = np.fromiter((ranges[k].begin for k in names), np.int64, n)
    end = np.fromiter((ranges[k].end for k in names), np.int64, n)
    size = np.fromiter((sizes[k] for k in names), np.int64, n)
    fixed_offset = np.array([f.offset for f in fixed if f.size > 0], np.int64)
    fixed_end = np.array([f.end for f in fixed if f.size > 0], np.int64)
    fixed_top = max((f.end for f in fixed), default=0)

    search = _Search(begin, end, size, alignment, fixed_offset, fixed_end)
    if strategy == "auto":
        strategy = "best" if n <= BEST_AUTO_LIMIT else "greedy"
    if strategy == "greedy":
        search.run("size", search.orders()["size"], best_fit=True)
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

    def orders(self) -> dict[str, np.ndarray]:
        """Candidate orders; every key ends in (begin, name) for a total order."""
        begin, end, size, rank = self.begin, self.end, self.size, self.name_rank
        life = end - begin + 1
        keys = {
            "size": (rank, begin, -size),
            "conflict": (rank, begin, -size, -self._conflict()),
            "begin": (rank, -size, begin),
            "end": (rank, begin, -size, -end),
            "lifetime": (rank, begin, -size, -life),
            "area": (rank, begin, -size, -size * life),
        }
        return {label: self._nonempty(np.lexsort(key)) for label, key in keys.items()}

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

    def run(self, label: str, order: np.ndarray, best_fit: bool) -> np.ndarray:
        offsets = greedy_offsets(
            self.begin, self.end, self.size, order, self.alignment, *self.fixed, best_fit
        )
        top = int((offsets + self.size).max()) if len(order) else 0
        if self.best_top is None or top < self.best_top:
            self.best_top, self.best_offsets = top, offsets
            self.best_label = f"{label}/{'best' if best_fit else 'first'}-fit"
        return offsets

    def best(self) -> None:
        started = []
        for label, order in self.orders().items():
            for best_fit in (True, False):
                offsets = self.run(label, order, best_fit)
                started.append((int((offsets + self.size).max(initial=0)), label, order, best_fit))
        n = int(self.nonempty.sum())
        if n < 2:
            return
        rounds = min(_IMPROVE_ROUNDS, BEST_WORK // n)
        started.sort(key=lambda item: item[0])  # stable: ties keep the listing order
        starts = started[:_IMPROVE_STARTS]
        for k in range(rounds):
            _, label, order, best_fit = starts[k % len(starts)]
            share = _PROMOTION[(k // len(starts)) % len(_PROMOTION)]
            offsets = self.run(f"{label}+promoted", order, best_fit)
            starts[k % len(starts)] = (0, label, self._promote(order, offsets, share), best_fit)

    def _promote(self, order: np.ndarray, offsets: np.ndarray, share: float) -> np.ndarray:
        """Move the buffers that reach the top of the arena earlier in `order`,
        each by `share` of its position: placed sooner, they find lower gaps."""
        ends = offsets + self.size
        top = ends[order].max()
        order = order.tolist()
        on_top = {int(i) for i in np.nonzero(ends == top)[0]}
        for position in [p for p, i in enumerate(order) if i in on_top]:
            buffer = order.pop(position)
            order.insert(max(0, int(position * (1 - share)) - 1), buffer)
        return np.array(order, np.int64)
