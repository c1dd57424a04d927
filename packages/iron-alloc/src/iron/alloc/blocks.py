"""The greedy pass for large, dense graphs: time cut into blocks, unions cached per block.

A buffer's obstacles are the placed buffers live somewhere in its window
`[c0, c1]` (steps compressed to ranks). On real traces thousands of them are
live at any step, but their union is a hundred-odd byte intervals, because
the long-lived ones pack together. So steps are grouped into blocks of about
`BLOCK_EVENTS` begin and end events (a step with more than half that many is
a block of its own), and the window's obstacles come from a few small parts.
With `x` and `y` the blocks of `c0` and `c1`:

- begun before `x`: when `c0` is the first step of `x`, the cached union of
  the buffers live there (`live`); else the cached union of those spanning
  all of `x` (`span`) plus those ending inside `x` at or after `c0`, a suffix
  of the end slots of `x`;
- begun in `x`: the begin slots of `x` up to `c1` (all of them when `y > x`),
  masked by end >= `c0` unless `c0` is the first step of `x`;
- begun in the blocks strictly between: cached unions of the buffers begun in
  aligned runs of blocks (`begun`), a few per window; `x` and `y` join them
  when the window covers them whole;
- begun in `y > x`: the begin slots of `y` up to `c1`.

A slot holds `[offset, aligned end)` of its buffer, `[0, 0)` until placed,
which takes no bytes. Caches are merged unions (sorted, disjoint), brought up
to date only when a query needs them and something relevant was placed since:
`span` and `live` by scanning the placements since their last update, `begun`
from per-node pending lists (read unmerged while short).

The gap rule is the one of `greedy.py`: with starts and ends sorted
separately, the k-th smallest end below the (k+1)-th smallest start bounds a
gap; ends are stored aligned up, so each such end is the gap's offset. Every
query holds the base: `[0, 0)`, so the lowest gap starts at 0, and a column
of start `int64 max` and end 0. That column puts one more end below all ends
and one more start above all starts, so the sorted rows line up each start
with the end before it, and one subtraction gives every gap, the last one
being the room above the highest end (it always fits).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

import numpy as np

BLOCK_EVENTS = 512
"""Begin and end events per block: more means fewer cache updates and longer slot scans."""
_PENDING = 8  # a `begun` node merges its pending buffers once it has more than this
_EMPTY = np.zeros((2, 0), np.int64)
_BASE = np.array([[0, np.iinfo(np.int64).max], [0, 0]])  # the gap rule above


@contextmanager
def _no_cycle_collection():
    """The loop makes a few small containers per buffer and keeps big lists
    alive; the cycle collector would walk those lists again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _merged(union: np.ndarray, more: np.ndarray) -> np.ndarray:
    """The union of a merged union and more intervals (each 2 x k: starts, ends)."""
    starts, ends = both = np.concatenate((union, more), axis=1)
    both.sort(axis=1)
    breaks = (starts[1:] > ends[:-1]).nonzero()[0]
    merged = np.empty((2, len(breaks) + 1), np.int64)
    merged[0, 0] = starts[0]
    merged[0, 1:] = starts[breaks + 1]
    merged[1, :-1] = ends[breaks]
    merged[1, -1] = ends[-1]
    return merged


def distinct_steps(begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The sorted distinct values of both arrays (sorting beats np.unique's hashing here)."""
    steps = np.concatenate((begin, end))
    steps.sort()
    keep = np.ones(len(steps), bool)
    keep[1:] = steps[1:] != steps[:-1]
    return steps[keep]


def _blocks(begin: np.ndarray, end: np.ndarray, steps: int) -> np.ndarray:
    """Block of each step: about BLOCK_EVENTS events a block, heavy steps alone."""
    events = np.bincount(begin, minlength=steps) + np.bincount(end, minlength=steps)
    before = np.cumsum(events) - events
    heavy = events > BLOCK_EVENTS // 2
    first = np.ones(steps, bool)
    first[1:] = (before[1:] // BLOCK_EVENTS != before[:-1] // BLOCK_EVENTS) | heavy[1:] | heavy[:-1]
    return np.cumsum(first) - 1


def blocked_offsets(
    begin: np.ndarray,
    end: np.ndarray,
    size: np.ndarray,
    order: np.ndarray,
    alignment: int,
    fixed_offset: np.ndarray,
    fixed_end: np.ndarray,
    best_fit: bool = True,
) -> np.ndarray:
    """Same contract and result as `greedy.greedy_offsets`, built for many buffers."""
    with _no_cycle_collection():
        return _blocked_offsets(
            begin, end, size, order, alignment, fixed_offset, fixed_end, best_fit
        )


def _blocked_offsets(begin, end, size, order, alignment, fixed_offset, fixed_end, best_fit):
    n = len(order)
    offsets = np.zeros(len(size), np.int64)
    if n == 0:
        return offsets
    a = alignment
    base = _BASE
    if len(fixed_offset):
        base = np.concatenate((base, np.stack((fixed_offset, -(-fixed_end // a) * a))), axis=1)
    held = base.shape[1]

    # from here a buffer is its position in `order`, a step its rank
    steps = distinct_steps(begin[order], end[order])
    c0 = np.searchsorted(steps, begin[order])
    c1 = np.searchsorted(steps, end[order])
    block = _blocks(c0, c1, len(steps))
    n_blocks = int(block[-1]) + 1
    first_step = np.flatnonzero(np.diff(block, prepend=-1))
    last_step = np.append(first_step[1:] - 1, len(steps) - 1)
    x, y = block[c0], block[c1]
    key = len(steps) + 1  # (block, step) as one sortable int

    # begin slots: every buffer, by (block, begin); end slots: buffers ending in
    # a later block than they begin, by (block, end), kept at the front of
    # `before[block]`, followed by the base and the block's span
    by_begin = np.lexsort((c0, x))
    slot = np.empty(n, np.int64)
    slot[by_begin] = np.arange(n)
    slot_end = np.full(n, -1, np.int64)  # set on placement: the masks below skip unplaced slots
    begin_key = x[by_begin] * key + c0[by_begin]
    begin_ptr = np.searchsorted(x[by_begin], np.arange(n_blocks + 1))
    crossing = np.flatnonzero(y > x)
    by_end = crossing[np.lexsort((c1[crossing], y[crossing]))]
    end_ptr = np.searchsorted(y[by_end], np.arange(n_blocks + 1))
    end_slot = np.full(n, -1, np.int64)
    end_slot[by_end] = np.arange(len(by_end)) - end_ptr[y[by_end]]
    n_ends = np.diff(end_ptr).tolist()
    ends_from = np.searchsorted(y[by_end] * key + c1[by_end], x * key + c0) - end_ptr[x]
    plans = zip(
        x.tolist(),
        y.tolist(),
        (c0 == first_step[x]).tolist(),
        (c1 == last_step[y]).tolist(),
        c0.tolist(),
        c1.tolist(),
        ends_from.tolist(),
        begin_ptr[x].tolist(),
        np.where(
            y == x, np.searchsorted(begin_key, x * key + c1, "right"), begin_ptr[x + 1]
        ).tolist(),
        begin_ptr[y].tolist(),
        np.searchsorted(begin_key, y * key + c1, "right").tolist(),
        size[order].tolist(),
        slot.tolist(),
        end_slot.tolist(),
    )

    slots = np.zeros((2, n), np.int64)
    slot_flat = slots.reshape(-1)  # a view: scalar stores into it are cheaper
    take = slots.take  # reads by index list: cheaper than fancy indexing
    before = [np.concatenate((np.zeros((2, k), np.int64), base), axis=1) for k in n_ends]
    # placements that enter `span` (begun two blocks or more before they end)
    # and `live` (begun in an earlier block), in placement order
    spanning = np.flatnonzero(y > x + 1)
    span_x, span_y, span_slot = x[spanning], y[spanning], slot[spanning]
    span_seen, span_dirty = [0] * n_blocks, [-1] * n_blocks
    cross_x, cross_y, cross_slot = x[crossing], y[crossing], slot[crossing]
    live, live_seen, live_dirty = [_EMPTY] * n_blocks, [0] * n_blocks, [-1] * n_blocks
    n_span = n_cross = 0
    # `begun` node (j, i) covers blocks [i << j, (i + 1) << j)
    levels = n_blocks.bit_length()
    begun = [[_EMPTY] * ((n_blocks >> j) + 1) for j in range(levels)]
    pending = [[[] for _ in range((n_blocks >> j) + 1)] for j in range(levels)]
    pending_adds = [
        tuple(pending[j][b >> j].append for j in range(levels)) for b in range(n_blocks)
    ]

    result = [0] * n
    concatenate, unsigned = np.concatenate, np.uint64
    for p, (bx, by, starts_x, ends_y, t0, t1, e_lo, b_lo, b_hi, y_lo, y_hi, s, js, je) in enumerate(
        plans
    ):
        if starts_x:
            if live_dirty[bx] >= live_seen[bx]:
                seen = live_seen[bx]
                new = (cross_x[seen:n_cross] < bx) & (cross_y[seen:n_cross] >= bx)
                live[bx] = _merged(live[bx], take(cross_slot[seen:n_cross][new], axis=1))
                live_seen[bx] = n_cross
            parts = [base, live[bx]]
        else:
            if span_dirty[bx] >= span_seen[bx]:
                seen = span_seen[bx]
                new = (span_x[seen:n_span] < bx) & (span_y[seen:n_span] > bx)
                kept = before[bx]
                k = n_ends[bx] + held
                span = _merged(kept[:, k:], take(span_slot[seen:n_span][new], axis=1))
                before[bx] = concatenate((kept[:, :k], span), axis=1)
                span_seen[bx] = n_span
            parts = [before[bx][:, e_lo:]]
        if by == bx and not (starts_x and ends_y):
            if starts_x:
                parts.append(slots[:, b_lo:b_hi])
            else:
                parts.append(slots[:, b_lo:b_hi].compress(slot_end[b_lo:b_hi] >= t0, axis=1))
        else:
            lo, hi = bx, by + 1
            if not starts_x:
                parts.append(slots[:, b_lo:b_hi].compress(slot_end[b_lo:b_hi] >= t0, axis=1))
                lo += 1
            if not ends_y:
                parts.append(slots[:, y_lo:y_hi])
                hi -= 1
            runs, j = [], 0
            while lo < hi:  # the aligned runs covering blocks lo..hi-1
                if lo & 1:
                    runs.append((j, lo))
                    lo += 1
                if hi & 1:
                    hi -= 1
                    runs.append((j, hi))
                lo >>= 1
                hi >>= 1
                j += 1
            for j, i in runs:
                waiting = pending[j][i]
                if len(waiting) > _PENDING:
                    begun[j][i] = _merged(begun[j][i], take(waiting, axis=1))
                    waiting.clear()
                elif waiting:
                    parts.append(take(waiting, axis=1))
                parts.append(begun[j][i])
        union = concatenate(parts, axis=1)
        union.sort(axis=1)
        gaps = union[0] - union[1]
        if best_fit:
            gaps -= s
            k = gaps.view(unsigned).argmin()  # a gap below the size wraps to a huge value
        else:
            k = (gaps >= s).argmax()
        offset = union.item(1, k)

        result[p] = offset
        top = -(-(offset + s) // a) * a
        slot_flat[js] = offset
        slot_flat[js + n] = top
        slot_end[js] = t1
        if je >= 0:
            kept = before[by]
            kept[0, je] = offset
            kept[1, je] = top
            live_dirty[bx + 1 : by + 1] = [n_cross] * (by - bx)
            n_cross += 1
            if by > bx + 1:
                span_dirty[bx + 1 : by] = [n_span] * (by - bx - 1)
                n_span += 1
        for add in pending_adds[bx]:
            add(js)
    offsets[order] = result
    return offsets
