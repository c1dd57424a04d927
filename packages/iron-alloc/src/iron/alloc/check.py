"""Proof that a plan is safe: no two buffers share a byte while they share a step."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping

from .liveness import LiveRange
from .planner import Plan


class OverlapError(ValueError):
    """A plan puts two live buffers on the same bytes, or a buffer off its alignment."""


def check(plan: Plan, ranges: Mapping[str, LiveRange], sizes: Mapping[str, int]) -> None:
    """Raise `OverlapError` unless `plan` is safe for `ranges` and `sizes`.

    Safe means: every buffer in `ranges` has an offset that is a multiple of
    `plan.alignment`, ends within `plan.size`, and shares no byte with any
    other buffer (or fixed allocation of the plan) that is live at one of its
    steps; fixed allocations are live at every step, so no two of them share
    a byte either. The message names the two buffers, their ranges and byte spans.
    Buffers of size 0 take no bytes. Runs in O(n log n): a sweep over steps
    keeps the live buffers ordered by offset and compares each newcomer with
    its neighbours only, which finds an overlap whenever one exists.
    """
    spans = []
    for name, live in ranges.items():
        if name not in plan.offsets:
            raise OverlapError(f"check: buffer {name!r} has no offset in the plan")
        offset, size = plan.offsets[name], sizes[name]
        if offset % plan.alignment:
            raise OverlapError(
                f"check: buffer {name!r} at offset {offset} is not a multiple of "
                f"the alignment {plan.alignment}"
            )
        if offset < 0 or offset + size > plan.size:
            raise OverlapError(
                f"check: buffer {name!r} spans bytes [{offset}, {offset + size}), "
                f"outside the arena [0, {plan.size})"
            )
        if size > 0:
            spans.append((live.begin, live.end, offset, offset + size, name))
    # fixed allocations hold their bytes at every step: two of them overlapping
    # are unsafe even with no buffer planned around them
    first = min((span[0] for span in spans), default=0)
    last = max((span[1] for span in spans), default=0)
    for allocation in plan.fixed:
        if allocation.size > 0:
            spans.append((first, last, allocation.offset, allocation.end, allocation.name))

    # at one step, the buffers that ended before it leave before newcomers arrive
    events = sorted(
        [(span[0], 1, index) for index, span in enumerate(spans)]
        + [(span[1] + 1, 0, index) for index, span in enumerate(spans)]
    )
    live_keys: list[tuple[int, int, int]] = []  # (offset, end, index), ordered by offset
    for _, arriving, index in events:
        key = (spans[index][2], spans[index][3], index)
        if not arriving:
            del live_keys[bisect_left(live_keys, key)]
            continue
        at = bisect_left(live_keys, key)
        for neighbour in live_keys[max(at - 1, 0) : at + 1]:
            low, high = sorted((key, neighbour))
            if low[1] > high[0]:
                _raise_overlap(plan, ranges, spans[low[2]], spans[high[2]])
        live_keys.insert(at, key)


def _raise_overlap(plan: Plan, ranges: Mapping[str, LiveRange], a: tuple, b: tuple) -> None:
    fixed = {allocation.name for allocation in plan.fixed}

    def describe(span: tuple) -> str:
        name = span[4]
        when = (
            "fixed, every step"
            if name in fixed and name not in ranges
            else (f"steps [{span[0]}, {span[1]}]")
        )
        return f"{name!r} ({when}, bytes [{span[2]}, {span[3]}))"

    raise OverlapError(f"check: {describe(a)} overlaps {describe(b)}")
