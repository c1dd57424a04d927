"""Access patterns the Gemma 4 designs share: counts too large for one
wrapped dimension of a shim transfer, split over two."""

from __future__ import annotations

from iron.core import Device
from iron.design import TAP


def split_count(count: int, limit: int) -> tuple[int, int]:
    """(hi, lo) with hi * lo == count and lo the largest divisor <= limit."""
    lo = max(d for d in range(1, min(count, limit) + 1) if count % d == 0)
    return count // lo, lo


def rows_tap(offset: int, rows: int, stride: int, width: int, device: Device) -> TAP:
    """`rows` rows of `width` elements, `stride` apart, from `offset`: the
    rows over two dimensions when more than a shim wrap (the device's)
    holds; the outer one has no wrap field."""
    limit = device.limits("shim").max_wrap
    if rows <= limit:
        return TAP(offset, (rows, width), (stride, 1))
    hi, lo = split_count(rows, limit)
    return TAP(offset, (hi, lo, width), (lo * stride, stride, 1))
