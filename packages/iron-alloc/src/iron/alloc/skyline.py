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

import heapq
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
    first_step, last_step, sizes = first.tolist(), last.tolist(), size[priority].tolist()
    waiting = np.ones(len(priority), bool)
    fixed = sorted(zip(fixed_offset.tolist(), fixed_end.tolist(), strict=True))
    a = alignment
    # the skyline as maximal runs of equal height: run k covers steps
    # starts[k] .. starts[k + 1] - 1 at heights[k] (the last entry closes the
    # list); a heap of (height, start) finds the lowest, leftmost run
    starts, heights = [0, len(steps)], [0, None]
    lowest = [(0, 0)]

    def settle(k: int) -> None:
        """Merge run k with neighbours of its height and queue the result."""
        if k + 2 < len(starts) and heights[k + 1] == heights[k]:
            del starts[k + 1], heights[k + 1]
        if k > 0 and heights[k - 1] == heights[k]:
            del starts[k], heights[k]
            k -= 1
        heapq.heappush(lowest, (heights[k], starts[k]))

    placed = 0
    while placed < len(priority):
        floor, lo = heapq.heappop(lowest)
        k = bisect_left(starts, lo)
        if starts[k] != lo or heights[k] != floor:
            continue  # that run changed after it was queued
        hi = starts[k + 1] - 1
        window = by_first[bisect_left(firsts, lo) : bisect_right(firsts, hi)]
        if len(window):
            window = window[waiting[window] & (last[window] <= hi)]
        if not len(window):  # nothing fits: raise the run to its lower neighbour
            heights[k] = min(heights[j] for j in (k - 1, k + 1) if 0 <= j < len(starts) - 1)
            settle(k)
            continue
        rank = int(window.min())
        waiting[rank] = False
        placed += 1
        s = sizes[rank]
        offset = -(-floor // a) * a
        for start, stop in fixed:  # sorted by start: step over each one in the way
            if offset < stop and start < offset + s:
                offset = -(-stop // a) * a
        offsets[priority[rank]] = offset
        # run k becomes [lo, since) at the floor, the buffer's steps on top of
        # it, and (until, hi] at the floor
        since, until = first_step[rank], last_step[rank]
        if until < hi:
            starts.insert(k + 1, until + 1)
            heights.insert(k + 1, floor)
            heapq.heappush(lowest, (floor, until + 1))
        if since > lo:
            starts.insert(k + 1, since)
            heights.insert(k + 1, offset + s)
            heapq.heappush(lowest, (floor, lo))
            k += 1
        else:
            heights[k] = offset + s
        settle(k)
    return offsets
