"""When is each buffer alive: live ranges from a step list, and the lower bound they imply.

A step is a pair `(reads, writes)` of buffer names; steps run in order and a
step reads its inputs before it writes its outputs. Step indices are the time
axis of every plan, and a `LiveRange` is inclusive on both ends.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Step = tuple[Collection[str], Collection[str]]


@dataclass(frozen=True, order=True)
class LiveRange:
    """The steps `begin..end` (both inclusive) during which a buffer holds data.

    Two ranges overlap when they share a step: `[0, 1]` and `[1, 2]` overlap,
    `[0, 1]` and `[2, 3]` do not. Requires `0 <= begin <= end`.
    """

    begin: int
    end: int

    def __post_init__(self) -> None:
        for field in ("begin", "end"):
            value = getattr(self, field)
            if isinstance(value, bool):
                raise TypeError(f"LiveRange: {field} must be an int, got bool")
            try:
                object.__setattr__(self, field, operator.index(value))
            except TypeError:
                raise TypeError(
                    f"LiveRange: {field} must be an int, got {type(value).__name__}"
                ) from None
        if not 0 <= self.begin <= self.end:
            raise ValueError(
                f"LiveRange: need 0 <= begin <= end, got begin={self.begin}, end={self.end}"
            )

    def overlaps(self, other: LiveRange) -> bool:
        """True when the two ranges share at least one step."""
        return self.begin <= other.end and other.begin <= self.end

    def __len__(self) -> int:
        return self.end - self.begin + 1


def _checked_steps(function: str, steps: Sequence[Step]) -> list[tuple[list[str], list[str]]]:
    checked = []
    for index, step in enumerate(steps):
        try:
            reads, writes = step
        except (TypeError, ValueError):
            raise ValueError(
                f"{function}: step {index} must be a (reads, writes) pair, got {step!r}"
            ) from None
        names = []
        for role, group in (("reads", reads), ("writes", writes)):
            if isinstance(group, str):
                raise TypeError(
                    f"{function}: step {index} {role} must be a collection of names, "
                    f"got the string {group!r}"
                )
            group = list(group)
            for name in group:
                if not isinstance(name, str):
                    raise TypeError(
                        f"{function}: step {index} {role} holds {name!r}; names must be str"
                    )
            names.append(group)
        checked.append((names[0], names[1]))
    return checked


def live_ranges(steps: Sequence[Step], pinned: Iterable[str] = ()) -> dict[str, LiveRange]:
    """The poolable buffers of `steps` and the range each must keep its bytes.

    Names are opaque: a caller that views part of a buffer names the buffer
    (and pins it if it must not be pooled). A buffer is poolable when some
    step writes it and a later step reads it; its range runs from its first
    write to its last touch (a write after the last read still writes its
    bytes, so it extends the range too). No range is given to a buffer that
    is pinned, read at or before its first write (a host input: an in-place
    first touch reads outside data) or never read after it is written (a
    host output). Buffers appear in the result in order of first write.
    """
    steps = _checked_steps("live_ranges", steps)
    pinned = set(pinned)
    first_write: dict[str, int] = {}
    first_read: dict[str, int] = {}
    last_touch: dict[str, int] = {}
    for index, (reads, writes) in enumerate(steps):
        for name in reads:
            first_read.setdefault(name, index)
            last_touch[name] = index
        for name in writes:
            first_write.setdefault(name, index)
            last_touch[name] = index
    # first_read.get(name, begin) <= begin: a host input (read first) or output (never read)
    return {
        name: LiveRange(begin, last_touch[name])
        for name, begin in first_write.items()
        if name not in pinned and first_read.get(name, begin) > begin
    }


def touch_ranges(steps: Sequence[Step], names: Iterable[str]) -> dict[str, LiveRange]:
    """For each of `names`, the range from the first step touching it to the last.

    The arena rule: nothing is pinned and host I/O does not matter, a buffer
    simply occupies its bytes from its first touch (read or write) to its
    last. A name that no step touches is live
    for the whole run, `LiveRange(0, len(steps) - 1)` (`LiveRange(0, 0)` when
    there are no steps).
    """
    steps = _checked_steps("touch_ranges", steps)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, (reads, writes) in enumerate(steps):
        for name in (*reads, *writes):
            first.setdefault(name, index)
            last[name] = index
    whole = LiveRange(0, max(len(steps) - 1, 0))
    return {name: LiveRange(first[name], last[name]) if name in first else whole for name in names}


def peak_live_bytes(ranges: Mapping[str, LiveRange], sizes: Mapping[str, int]) -> int:
    """The lower bound on any arena for `ranges`: the most bytes live at one step.

    Sums `sizes[name]` over the buffers live at each step and returns the
    maximum (0 for no buffers). No plan of these buffers can be smaller;
    alignment can only make a plan larger.
    """
    if not ranges:
        return 0
    begin = np.fromiter((r.begin for r in ranges.values()), np.int64, len(ranges))
    end = np.fromiter((r.end for r in ranges.values()), np.int64, len(ranges))
    size = np.fromiter((sizes[name] for name in ranges), np.int64, len(ranges))
    return int(load_profile(begin, end, size)[1].max())


def load_profile(begin: np.ndarray, end: np.ndarray, size: np.ndarray):
    """(times, live): after the events at `times[k]`, `live[k]` bytes are live.

    Arrays of inclusive ranges and sizes in; a buffer frees at `end + 1`, and
    at equal times frees sort before allocations, so touching is not overlap.
    """
    times = np.concatenate([begin, end + 1])
    deltas = np.concatenate([size, -size])
    order = np.lexsort((deltas, times))
    return times[order], np.cumsum(deltas[order])
