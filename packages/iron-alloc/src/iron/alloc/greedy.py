"""One greedy pass: place buffers in a given order, each in a gap left by the
buffers already placed that share a step with it.

This is the inner loop of every strategy, so it works on integer arrays
(buffer i is live on steps `begin[i]..end[i]` and needs `size[i]` bytes) and
is built for speed, with two indexes of the placed buffers:

- the scan (here), for sparse graphs: buffers are grouped by lifetime (powers
  of `_LIFE_RATIO`) and sorted by begin inside a group, so the buffers that
  can overlap `[b, e]` in a group are one contiguous slice, those beginning in
  `[b - longest_life + 1, e]`. A query reads only those slices, in plain
  Python when they are short and with numpy when they are long.
- time blocks with cached unions (`blocks.py`), for dense graphs, where a
  query would otherwise read thousands of live buffers.

`greedy_offsets` picks the blocks when, on average, at least `DENSE_LIVE`
buffers are live at a step; both give the same offsets.

The gaps of a set of byte intervals fall where, with starts and ends sorted
separately, the k-th smallest end is below the (k+1)-th smallest start: the
running maximum of ends in offset order (the classic cursor) equals the k-th
smallest end exactly at a gap, and no interval covers a point between them.
Sorting the two columns separately is cheaper than sorting pairs.
"""

from __future__ import annotations

import numpy as np

from .blocks import blocked_offsets

DENSE_LIVE = 64
"""Mean buffers live per step from which `greedy_offsets` uses the block index."""
_LIFE_RATIO = 8  # lifetime groups: 1-8, 9-64, 65-512, ...
_PYTHON_SCAN = 96  # candidate slices shorter than this in total are read in plain Python
_NO_GAP = np.iinfo(np.int64).max


def greedy_offsets(
    begin: np.ndarray,
    end: np.ndarray,
    size: np.ndarray,
    order: np.ndarray,
    alignment: int,
    fixed_offset: np.ndarray,
    fixed_end: np.ndarray,
    best_fit: bool = True,
) -> np.ndarray:
    """Offsets (int64, one per buffer) from placing buffers in `order`.

    Each buffer goes in a gap between the byte intervals of the already placed
    buffers whose ranges overlap its own, plus the fixed intervals
    `[fixed_offset, fixed_end)` that are live at every step. Gaps start at 0 or
    at the aligned end of the interval below. With `best_fit` the smallest gap
    that fits wins, else the lowest; ties go to the lowest offset. When no gap
    fits the buffer goes on top, at the aligned highest end. Every buffer in
    `order` must have `size > 0`; buffers not in `order` get offset 0.
    """
    if len(order):
        span = int(end[order].max() - begin[order].min()) + 1
        if int((end[order] - begin[order] + 1).sum()) >= DENSE_LIVE * span:
            return blocked_offsets(
                begin, end, size, order, alignment, fixed_offset, fixed_end, best_fit
            )
    return scan_offsets(begin, end, size, order, alignment, fixed_offset, fixed_end, best_fit)


def scan_offsets(
    begin: np.ndarray,
    end: np.ndarray,
    size: np.ndarray,
    order: np.ndarray,
    alignment: int,
    fixed_offset: np.ndarray,
    fixed_end: np.ndarray,
    best_fit: bool = True,
) -> np.ndarray:
    """`greedy_offsets` with the scan index."""
    offsets = np.zeros(len(size), np.int64)
    if len(order) == 0:
        return offsets
    life = end[order] - begin[order] + 1
    group = np.zeros(len(order), np.int64)
    bound = _LIFE_RATIO
    while (longer := life > bound).any():
        group[longer] += 1
        bound *= _LIFE_RATIO

    # flat slots: group by group, by begin inside a group; per group and buffer
    # the slot slice [low, high) of the group members that may overlap it
    by_group_begin = np.lexsort((begin[order], group))
    members = order[by_group_begin]
    slot = np.empty(len(size), np.int64)
    slot[members] = np.arange(len(members))
    member_begin = begin[members]
    lows, highs = [], []
    for g in np.unique(group):
        first, stop = np.searchsorted(group[by_group_begin], [g, g + 1])
        longest = int(life[by_group_begin[first:stop]].max())
        group_begin = member_begin[first:stop]
        lows.append((first + np.searchsorted(group_begin, begin - longest + 1)).tolist())
        highs.append((first + np.searchsorted(group_begin, end, "right")).tolist())
    spans = list(zip(lows, highs, strict=True))

    # per slot: last step (-1 until placed), offset and end, as numpy and as lists
    slot_last = np.full(len(members), -1, np.int64)
    slot_offset = np.zeros(len(members), np.int64)
    slot_top = np.zeros(len(members), np.int64)
    last_py, offset_py, top_py = slot_last.tolist(), slot_offset.tolist(), slot_top.tolist()
    fixed_offset_py, fixed_end_py = fixed_offset.tolist(), fixed_end.tolist()
    n_fixed = len(fixed_offset_py)
    begins, ends, sizes, slots = begin.tolist(), end.tolist(), size.tolist(), slot.tolist()
    a = alignment

    placed = [0] * len(size)
    for i in order.tolist():
        b, s = begins[i], sizes[i]
        total = n_fixed
        for low, high in spans:
            total += high[i] - low[i]
        if total <= _PYTHON_SCAN:
            starts = fixed_offset_py[:]
            stops = fixed_end_py[:]
            for low, high in spans:
                low, high = low[i], high[i]
                for j in range(low, high):
                    if last_py[j] >= b:
                        starts.append(offset_py[j])
                        stops.append(top_py[j])
            starts.sort()
            stops.sort()
            best, best_gap, below = -1, 0, 0
            for start, stop in zip(starts, stops, strict=True):
                if start > below:  # a gap between the union's pieces
                    cursor = -(-below // a) * a
                    gap = start - cursor
                    if gap >= s and (best < 0 or gap < best_gap):
                        best, best_gap = cursor, gap
                        if not best_fit:
                            break
                below = stop
            offset = best if best >= 0 else -(-below // a) * a
        else:
            start_parts = [fixed_offset]
            stop_parts = [fixed_end]
            for low, high in spans:
                low, high = low[i], high[i]
                if high > low:
                    live = slot_last[low:high] >= b
                    start_parts.append(slot_offset[low:high][live])
                    stop_parts.append(slot_top[low:high][live])
            starts = np.concatenate(start_parts)
            offset = _numpy_gap(starts, np.concatenate(stop_parts), s, a, best_fit)
        placed[i] = offset
        j = slots[i]
        slot_last[j] = last_py[j] = ends[i]
        slot_offset[j] = offset_py[j] = offset
        slot_top[j] = top_py[j] = offset + s
    offsets[:] = placed
    return offsets


def _numpy_gap(starts: np.ndarray, stops: np.ndarray, size: int, a: int, best_fit: bool) -> int:
    """The offset the gap rule picks among intervals `[starts, stops)` (any order)."""
    if len(starts) == 0:
        return 0
    starts.sort()
    stops.sort()
    below = np.empty_like(stops)
    below[0] = 0
    below[1:] = stops[:-1]
    cursors = -(-below // a) * a if a > 1 else below
    gaps = starts - cursors
    fits = gaps >= size
    choice = int(np.argmin(np.where(fits, gaps, _NO_GAP)) if best_fit else np.argmax(fits))
    if fits[choice]:
        return int(cursors[choice])
    return -(-int(stops[-1]) // a) * a
