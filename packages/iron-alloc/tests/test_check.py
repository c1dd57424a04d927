import pytest

from iron.alloc import Allocation, LiveRange, OverlapError, Plan, check

RANGES = {"a": LiveRange(0, 2), "b": LiveRange(2, 4), "c": LiveRange(5, 6)}
SIZES = {"a": 64, "b": 64, "c": 128}


def test_a_safe_plan_passes():
    # c reuses a's and b's bytes: it starts after both end
    check(Plan({"a": 0, "b": 64, "c": 0}, size=128), RANGES, SIZES)


def test_overlap_names_both_buffers_ranges_and_bytes():
    plan = Plan({"a": 0, "b": 0, "c": 0}, size=128)
    with pytest.raises(OverlapError) as caught:
        check(plan, RANGES, SIZES)
    assert str(caught.value) == (
        "check: 'a' (steps [0, 2], bytes [0, 64)) overlaps 'b' (steps [2, 4], bytes [0, 64))"
    )


def test_partial_byte_overlap_is_found():
    plan = Plan({"a": 0, "b": 63, "c": 0}, size=256, alignment=1)
    with pytest.raises(
        OverlapError, match=r"'a' .*bytes \[0, 64\)\) overlaps 'b' .*bytes \[63, 127\)"
    ):
        check(plan, RANGES, SIZES)


def test_overlap_hidden_behind_a_long_neighbour_is_found():
    # b sits inside the span of the long, low x; only a sweep with neighbours finds it
    ranges = {"x": LiveRange(0, 9), "y": LiveRange(0, 9), "z": LiveRange(4, 4)}
    sizes = {"x": 64, "y": 64, "z": 64}
    with pytest.raises(OverlapError, match=r"'y' .* overlaps 'z'|'z' .* overlaps 'y'"):
        check(Plan({"x": 0, "y": 64, "z": 64}, size=192), ranges, sizes)


def test_misaligned_offset():
    with pytest.raises(
        OverlapError, match="'b' at offset 96 is not a multiple of the alignment 64"
    ):
        check(Plan({"a": 0, "b": 96, "c": 0}, size=256), RANGES, SIZES)


def test_missing_offset_and_outside_the_arena():
    with pytest.raises(OverlapError, match="buffer 'c' has no offset"):
        check(Plan({"a": 0, "b": 64}, size=128), RANGES, SIZES)
    with pytest.raises(
        OverlapError, match=r"'c' spans bytes \[64, 192\), outside the arena \[0, 128\)"
    ):
        check(Plan({"a": 0, "b": 64, "c": 64}, size=128), RANGES, SIZES)


def test_fixed_allocations_are_checked_at_every_step():
    plan = Plan({"a": 0, "b": 64, "c": 0}, size=256, fixed=(Allocation("w", 64, 64),))
    with pytest.raises(OverlapError, match=r"'b' .* overlaps 'w' \(fixed, every step"):
        check(plan, RANGES, SIZES)


def test_zero_size_buffers_take_no_bytes():
    check(
        Plan({"a": 0, "b": 0}, size=64),
        {"a": LiveRange(0, 1), "b": LiveRange(0, 1)},
        {"a": 64, "b": 0},
    )


def test_fixed_allocations_never_share_bytes_even_alone():
    plan = Plan({}, size=96, fixed=(Allocation("w", 0, 64), Allocation("v", 32, 64)))
    with pytest.raises(
        OverlapError, match=r"'w' \(fixed, every step, bytes \[0, 64\)\) overlaps 'v'"
    ):
        check(plan, {}, {})
