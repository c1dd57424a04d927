from itertools import pairwise

import pytest

from iron.alloc import LiveRange, live_ranges, peak_live_bytes, touch_ranges


def chain(*names):
    """x -> a -> b -> ...: step k reads names[k] and writes names[k + 1]."""
    return [([r], [w]) for r, w in pairwise(names)]


def test_chain_pools_only_intermediates():
    ranges = live_ranges(chain("x", "a", "b", "c", "out"))
    assert ranges == {"a": LiveRange(0, 1), "b": LiveRange(1, 2), "c": LiveRange(2, 3)}


def test_host_input_output_and_pinned_get_no_range():
    steps = [(["x"], ["a", "out1"]), (["a"], ["b"]), (["b"], ["out2"])]
    assert live_ranges(steps) == {"a": LiveRange(0, 1), "b": LiveRange(1, 2)}
    assert live_ranges(steps, pinned=["a"]) == {"b": LiveRange(1, 2)}


def test_in_place_first_touch_is_a_host_input():
    # step 0 reads and writes s: its first contents come from outside
    steps = [(["s"], ["s"]), (["s"], ["y"]), (["y"], ["z"])]
    assert "s" not in live_ranges(steps)


def test_names_are_opaque_text():
    """Nothing reads meaning into a name: bracketed text is one more buffer
    (a caller using part of a buffer names the buffer itself)."""
    steps = [(["x"], ["a[0:64]"]), (["a[0:64]"], ["a"]), (["a"], ["out"])]
    assert live_ranges(steps) == {"a[0:64]": LiveRange(0, 1), "a": LiveRange(1, 2)}
    assert touch_ranges(steps, ["a"]) == {"a": LiveRange(1, 2)}


def test_a_write_after_the_last_read_extends_the_range():
    steps = [(["x"], ["a"]), (["a"], ["b"]), (["b"], ["c"]), (["c"], ["a"])]
    assert live_ranges(steps)["a"] == LiveRange(0, 3)


def test_touch_ranges_first_to_last_touch_untouched_whole_run():
    steps = [(["w"], ["t"]), (["t"], ["u"]), (["u", "w"], ["y"])]
    assert touch_ranges(steps, ["w", "t", "u", "y", "idle"]) == {
        "w": LiveRange(0, 2),
        "t": LiveRange(0, 1),
        "u": LiveRange(1, 2),
        "y": LiveRange(2, 2),
        "idle": LiveRange(0, 2),
    }
    assert touch_ranges([], ["idle"]) == {"idle": LiveRange(0, 0)}


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([(["a"],)], "step 0 must be a (reads, writes) pair"),
        ([("a", ["b"])], "step 0 reads must be a collection of names"),
        ([([1], ["b"])], "step 0 reads holds 1; names must be str"),
    ],
)
def test_bad_steps_are_refused_by_name(steps, message):
    with pytest.raises(
        (TypeError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        live_ranges(steps)


def test_live_range_contract():
    assert LiveRange(0, 1).overlaps(LiveRange(1, 2))
    assert not LiveRange(0, 1).overlaps(LiveRange(2, 3))
    assert len(LiveRange(3, 5)) == 3
    with pytest.raises(ValueError, match="need 0 <= begin <= end, got begin=2, end=1"):
        LiveRange(2, 1)
    with pytest.raises(TypeError, match="begin must be an int, got float"):
        LiveRange(0.5, 1)


def test_peak_live_bytes_by_hand():
    ranges = {
        "a": LiveRange(0, 1),
        "b": LiveRange(1, 2),
        "c": LiveRange(2, 3),
        "d": LiveRange(3, 3),
    }
    sizes = {"a": 10, "b": 20, "c": 40, "d": 5}
    # step 0: 10, step 1: 30, step 2: 60, step 3: 45
    assert peak_live_bytes(ranges, sizes) == 60
    assert peak_live_bytes({}, {}) == 0
    # touching ranges share a step: [0,1] and [1,2] are live together at step 1
    assert peak_live_bytes({"a": LiveRange(0, 1), "b": LiveRange(1, 2)}, {"a": 7, "b": 8}) == 15
    assert peak_live_bytes({"a": LiveRange(0, 0), "b": LiveRange(1, 1)}, {"a": 7, "b": 8}) == 8
