"""Bottom-up placement on a skyline: another way to build a layout for `strategy="best"`.

The greedy pass takes buffers in a fixed order and drops each into the best
gap it finds. The skyline works the other way round: it keeps, per step, the
height of the highest placed byte, looks at the lowest stretch of steps (the
leftmost lowest step and its neighbours at the same height) and puts there the
first buffer, in a priority order, whose whole range fits inside that
stretch. When none fits, the stretch is raised to its lower neighbour and the
bytes in between stay empty. Every buffer is placed on a floor that is flat
across its range, so the layout has no holes but those given up on purpose;
on hard synthetic cases (minimalloc) that beats every greedy order.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from .blocks import distinct_steps


def skyline_offsets(
    begin: np.ndarray,
    end: np.ndarray,
    size: np.ndarray,
    priority: np.ndarray,
    alignment: int,
    fixed_offset: np.ndarray,
    fixed_end: np.ndarray,
) -> np.ndarray:
    """Offsets (int64, one per buffer) of a skyline layout.

    `priority` lists the buffers to place, most wanted first; each must have
    `size > 0` (others get offset 0). A buffer sits at its stretch's height
    rounded up to `alignment` and, if that overlaps a fixed interval
    `[fixed_offset, fixed_end)` (live at every step), above it.
    """
    offsets = np.zeros(len(size), np.int64)
    if len(priority) == 0:
        return offsets
    steps = distinct_steps(begin[priority], end[priority])
    first = np.searchsorted(steps, begin[priority])
    last = np.searchsorted(steps, end[priority])
    by_first = np.argsort(first, kind="stable")  # ranks in `priority`, by first step
    firsts = first[by_first].tolist()
    height = np.zeros(len(steps), np.int64)
    waiting = np.ones(len(priority), bool)
    fixed = sorted(zip(fixed_offset.tolist(), fixed_end.tolist(), strict=True))
    a = alignment
    for _ in range(len(priority)):
        while True:
            low = int(height.argmin())
            floor = int(height[low])
            other = height != floor
            lo = low - int(other[low::-1].argmax()) + 1 if other[:low].any() else 0
            hi = low + int(other[low:].argmax()) - 1 if other[low:].any() else len(steps) - 1
            # candidates: waiting buffers whose range lies inside [lo, hi]
            window = by_first[bisect_left(firsts, lo) : bisect_right(firsts, hi)]
            window = window[waiting[window] & (last[window] <= hi)]
            if len(window):
                break
            neighbours = [int(height[s]) for s in (lo - 1, hi + 1) if 0 <= s < len(steps)]
            height[lo : hi + 1] = min(neighbours)
        rank = int(window.min())
        waiting[rank] = False
        buffer, s = int(priority[rank]), int(size[priority[rank]])
        offset = -(-floor // a) * a
        for start, stop in fixed:  # sorted by start: step over each one in the way
            if offset < stop and start < offset + s:
                offset = -(-stop // a) * a
        offsets[buffer] = offset
        height[first[rank] : last[rank] + 1] = offset + s
    return offsets
