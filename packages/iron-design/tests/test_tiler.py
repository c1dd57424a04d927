"""The tensor tiler, held to visit orders enumerated here tile by tile (a
table computed without the tiler's sizes and strides), and to the TAPs
mlir-aie's own taplib tests name."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from iron.design import TAP
from iron.design.model import DesignError
from iron.design.tiler import group_tiler, simple_tiler, step_tiler


def _groups(tiles: int, repeat: int, step: int) -> list[list[int]]:
    """The tiles of each group along one dimension: chunks of repeat x step
    tiles, the k-th group of a chunk taking tiles k, k + step, ..."""
    if step > tiles:
        step = 1
    groups = []
    for start in range(0, tiles, repeat * step):
        for k in range(step):
            members = [start + k + a * step for a in range(repeat)]
            members = [m for m in members if m < tiles and m < start + repeat * step]
            if members:
                groups.append(members)
    return groups


def _visits(
    shape, tile, repeats=(1, 1), steps=(1, 1), *, tile_col_major=False,
    group_col_major=False, iter_col_major=False, pattern_repeat=1,
):  # fmt: skip
    """Each TAP's elements in visit order, enumerated one tile at a time."""
    (height, width), (rows, cols) = shape, tile
    downs = _groups(height // rows, repeats[0], steps[0])
    acrosses = _groups(width // cols, repeats[1], steps[1])
    pairs = (
        [(d, a) for a in acrosses for d in downs]
        if iter_col_major
        else [(d, a) for d in downs for a in acrosses]
    )
    out = []
    for down, across in pairs:
        if group_col_major:
            members = [(i, j) for j in across for i in down]
        else:
            members = [(i, j) for i in down for j in across]
        visit = []
        for i, j in members:
            cells = itertools.product(
                range(i * rows, (i + 1) * rows), range(j * cols, (j + 1) * cols)
            )
            if tile_col_major:
                cells = sorted(cells, key=lambda rc: (rc[1], rc[0]))
            visit += [r * width + c for r, c in cells]
        out.append(visit * pattern_repeat)
    return out


CASES = [
    # shape, tile, repeats, steps, flags
    ((8, 8), (2, 4), (1, 1), (1, 1), {}),
    ((8, 8), (2, 4), (1, 1), (1, 1), {"tile_col_major": True}),
    ((8, 8), (2, 4), (1, 1), (1, 1), {"iter_col_major": True}),
    ((12, 8), (2, 2), (3, 2), (1, 1), {}),
    ((12, 8), (2, 2), (3, 2), (1, 1), {"group_col_major": True}),
    ((12, 8), (2, 2), (3, 2), (1, 1), {"tile_col_major": True, "iter_col_major": True}),
    ((12, 8), (2, 2), (3, 1), (1, 1), {"group_col_major": True}),  # stacked tiles: one tall tile
    ((12, 8), (2, 2), (1, 4), (1, 1), {"tile_col_major": True}),  # side by side: one wide tile
    ((16, 16), (2, 2), (2, 2), (2, 2), {}),  # interleaved groups
    ((16, 16), (2, 2), (2, 2), (2, 2), {"group_col_major": True, "iter_col_major": True}),
    ((8, 8), (2, 2), (1, 1), (1, 1), {"pattern_repeat": 3}),
    ((8, 12), (2, 2), (1, 3), (1, 1), {"pattern_repeat": 2}),
]


@pytest.mark.parametrize("shape, tile, repeats, steps, flags", CASES)
@pytest.mark.parametrize("prune_step", [True, False])
def test_each_tap_visits_its_group_in_order(shape, tile, repeats, steps, flags, prune_step):
    flags = dict(flags)
    group_col_major = flags.pop("group_col_major", False)
    taps = step_tiler(
        shape, tile, repeats, steps, tile_group_col_major=group_col_major,
        prune_step=prune_step, **flags,
    )  # fmt: skip
    expected = _visits(shape, tile, repeats, steps, group_col_major=group_col_major, **flags)
    assert [tap.indices().tolist() for tap in taps] == expected
    assert all(len(tap.sizes) == 4 for tap in taps)
    if flags.get("pattern_repeat", 1) == 1:  # every element once
        seen = np.sort(np.concatenate([tap.indices() for tap in taps]))
        assert np.array_equal(seen, np.arange(shape[0] * shape[1]))


def test_partial_groups_at_the_edges():
    shape, tile = (10, 6), (2, 2)
    with pytest.raises(DesignError, match="not a whole number of groups"):
        group_tiler(shape, tile, (2, 2))
    taps = group_tiler(shape, tile, (2, 2), allow_partial=True)
    assert [t.indices().tolist() for t in taps] == _visits(shape, tile, (2, 2))
    assert [t.count for t in taps] == [16, 8, 16, 8, 8, 4]


def test_the_simple_tiler_is_one_tap_per_tile_or_the_whole_tensor():
    assert [t.indices().tolist() for t in simple_tiler((6, 4), (3, 2))] == _visits((6, 4), (3, 2))
    (whole,) = simple_tiler((6, 4))
    assert whole.indices().tolist() == list(range(24))


def test_the_taps_mlir_aies_taplib_tests_name():
    """test/python/taplib/group_tiler.py at the pin."""
    taps = group_tiler((3 * 5 * 3, 2 * 7 * 2), tile_dims=(3, 2), tile_group_dims=(5, 7))
    assert len(taps) == 3 * 2
    assert taps[0] == TAP(0, (5, 7, 3, 2), (84, 2, 28, 1))
    assert taps[1] == TAP(14, (5, 7, 3, 2), (84, 2, 28, 1))
    assert taps[2] == TAP(420, (5, 7, 3, 2), (84, 2, 28, 1))
    assert len(group_tiler((3 * 5, 2 * 7), tile_dims=(3, 2))) == 5 * 7


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: simple_tiler((8, 8), (3, 4)), r"tensor dimension 0 \(8\) is not a whole number"),
        (lambda: simple_tiler((8, 8, 8), (2, 2)), "two sizes"),
        (lambda: simple_tiler((8, 8), (2, 2.0)), r"tile_dims\[1\] is an int, got float"),
        (lambda: simple_tiler((8, 8), (2, 2), pattern_repeat=0), "pattern_repeat = 0 is outside"),
        (
            lambda: group_tiler((8, 8), (2, 2), (2, 2), pattern_repeat=2),
            "pattern_repeat 2 needs the highest of four dimensions",
        ),
    ],
)
def test_what_cannot_be_tiled_is_refused_by_name(call, message):
    with pytest.raises(DesignError, match=message):
        call()
