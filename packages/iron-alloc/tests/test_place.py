import random
from itertools import pairwise
from pathlib import Path

import pytest

import iron.alloc.greedy as greedy_module
from iron.alloc import (
    DEFAULT_GAP,
    Allocation,
    LiveRange,
    check,
    live_ranges,
    peak_live_bytes,
    place,
)
from iron.alloc.bench import REAL, load_instance

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"


def records(sizes, intervals):
    names = [f"t{k}" for k in range(len(sizes))]
    ranges = {n: LiveRange(*iv) for n, iv in zip(names, intervals, strict=True)}
    return names, ranges, dict(zip(names, sizes, strict=True))


CHAIN = ([16, 8, 64, 32, 8], [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)])
COMPLEX = (
    [32, 32, 8, 16, 8, 64, 8, 8, 16],
    [(0, 1), (1, 4), (2, 5), (3, 5), (4, 5), (5, 7), (6, 8), (7, 8), (8, 9)],
)


@pytest.mark.parametrize(
    ("case", "alignment", "offsets", "total"),
    [
        (CHAIN, 1, [0, 64, 0, 64, 0], 96),
        (CHAIN, 128, [0, 128, 0, 128, 0], 160),
        (COMPLEX, 1, [0, 32, 80, 64, 88, 0, 64, 72, 0], 96),
    ],
)
def test_tflite_golden_vectors(case, alignment, offsets, total):
    names, ranges, sizes = records(*case)
    plan = place(ranges, sizes, alignment=alignment, strategy="greedy")
    assert [plan.offsets[n] for n in names] == offsets
    assert plan.size == total
    check(plan, ranges, sizes)


def steps_chain(n, size):
    names = ["x", *(f"h{k}" for k in range(n)), "out"]
    steps = [([r], [w]) for r, w in pairwise(names)]
    return steps, dict.fromkeys(names, size)


def test_chain_ping_pongs_in_exactly_two_buffers():
    steps = [(["x"], ["a"]), (["a"], ["b"]), (["b"], ["c"]), (["c"], ["out"])]
    ranges = live_ranges(steps)
    sizes = dict.fromkeys(["x", "a", "b", "c", "out"], 1024)
    plan = place(ranges, sizes)
    assert plan.size == 2048 == peak_live_bytes(ranges, sizes)
    assert plan.offsets["a"] == plan.offsets["c"] != plan.offsets["b"]


def test_fan_out_fan_in_needs_two_buffers_of_4096():
    steps = [(["x"], ["l"]), (["x"], ["r"]), (["l", "r"], ["out"])]
    ranges = live_ranges(steps)
    assert set(ranges) == {"l", "r"}  # x and out are host I/O
    sizes = dict.fromkeys(["x", "l", "r", "out"], 4096)
    plan = place(ranges, sizes)
    assert plan.size == 8192
    assert plan.offsets["l"] != plan.offsets["r"]
    check(plan, ranges, sizes)


def test_sixteen_repeated_layers_fold_to_two_mib():
    steps, sizes = steps_chain(16, 1 << 20)
    ranges = live_ranges(steps)
    plan = place(ranges, sizes)
    naive = sum(sizes[n] for n in ranges)
    assert plan.size <= 2 << 20
    assert plan.size == peak_live_bytes(ranges, sizes)
    assert plan.size < naive / 7


def test_ragged_sizes_reach_the_peak():
    steps, sizes = steps_chain(12, 0)
    sizes.update({f"h{k}": (1 + (k * 7) % 5) * 4096 for k in range(12)})
    ranges = live_ranges(steps)
    assert place(ranges, sizes).size == peak_live_bytes(ranges, sizes)


def test_small_buffers_land_on_aligned_offsets():
    steps, sizes = steps_chain(6, 100)
    ranges = live_ranges(steps)
    plan = place(ranges, sizes, alignment=64)
    assert all(offset % 64 == 0 for offset in plan.offsets.values())
    assert {plan.offsets[n] for n in ranges} == {0, 128}


def test_empty_graph():
    plan = place({}, {})
    assert plan.offsets == {} and plan.size == 0


def test_zero_size_buffers_take_no_bytes():
    ranges = {"a": LiveRange(0, 3), "empty": LiveRange(0, 3)}
    plan = place(ranges, {"a": 64, "empty": 0})
    assert plan.offsets["empty"] == 0 and plan.size == 64


def test_fixed_allocations_are_obstacles_at_every_step():
    ranges = {"a": LiveRange(0, 1), "b": LiveRange(2, 3)}
    sizes = {"a": 64, "b": 64}
    fixed = (Allocation("w", 0, 128), Allocation("state", 256, 64))
    plan = place(ranges, sizes, fixed=fixed, strategy="greedy")
    # the 128-byte hole between the fixed allocations takes both (one at a time)
    assert plan.offsets == {"a": 128, "b": 128}
    assert plan.size == 320
    check(plan, ranges, sizes)


def random_instance(rng, n, horizon, max_size):
    ranges, sizes = {}, {}
    for k in range(n):
        begin = rng.randrange(horizon)
        ranges[f"b{k}"] = LiveRange(begin, min(horizon, begin + rng.choice([0, 1, 2, 5, 20, 80])))
        sizes[f"b{k}"] = rng.randrange(1, max_size)
    return ranges, sizes


@pytest.mark.parametrize("python_scan", [96, 0])  # 0: every query takes the numpy path
@pytest.mark.parametrize("alignment", [1, 64])
def test_fast_greedy_equals_the_plain_reference(
    monkeypatch, reference_greedy, python_scan, alignment
):
    monkeypatch.setattr(greedy_module, "_PYTHON_SCAN", python_scan)
    rng = random.Random(alignment + python_scan)
    for trial in range(20):
        ranges, sizes = random_instance(rng, 5 + 15 * trial, 40, 5000)
        plan = place(ranges, sizes, alignment=alignment, strategy="greedy")
        assert plan.offsets == reference_greedy(ranges, sizes, alignment)


def test_best_is_never_worse_than_greedy_and_often_better():
    rng = random.Random(7)
    better = 0
    for _ in range(30):
        ranges, sizes = random_instance(rng, 60, 30, 1000)
        greedy = place(ranges, sizes, alignment=1, strategy="greedy")
        best = place(ranges, sizes, alignment=1, strategy="best")
        check(best, ranges, sizes)
        assert peak_live_bytes(ranges, sizes) <= best.size <= greedy.size
        better += best.size < greedy.size
    assert better >= 10


def test_a_budget_the_search_does_not_use_up_gives_the_plan_of_best():
    rng = random.Random(3)
    ranges, sizes = random_instance(rng, 80, 30, 1000)
    best = place(ranges, sizes, alignment=1, strategy="best")
    greedy = place(ranges, sizes, alignment=1, strategy="greedy")
    assert best.size < greedy.size  # this instance tells the two apart
    assert best.placements > 2 * len(ranges)  # several passes, so budgets below can cut it
    for budget in (best.placements, best.placements + 1, 10 * best.placements, None):
        assert place(ranges, sizes, alignment=1, budget=budget, gap=0) == best


def test_a_budget_buys_whole_passes_and_never_a_worse_plan():
    rng = random.Random(4)
    ranges, sizes = random_instance(rng, 80, 30, 1000)
    n = len(ranges)
    greedy = place(ranges, sizes, alignment=1, strategy="greedy")
    assert greedy.placements == n
    # plain greedy always runs, however small the budget
    assert place(ranges, sizes, alignment=1, budget=0) == greedy
    assert place(ranges, sizes, alignment=1, budget=2 * n - 1) == greedy
    sizes_seen = []
    for budget in (2 * n, 5 * n + 3, 20 * n, 80 * n):
        plan = place(ranges, sizes, alignment=1, budget=budget)
        check(plan, ranges, sizes)
        assert plan.placements % n == 0 and n < plan.placements <= budget
        sizes_seen.append(plan.size)
    assert sizes_seen == sorted(sizes_seen, reverse=True) and sizes_seen[-1] < greedy.size


def test_the_search_stops_at_the_lower_bound():
    steps, sizes = steps_chain(8, 1024)
    ranges = live_ranges(steps)
    plan = place(ranges, sizes, strategy="best")
    assert plan.size == peak_live_bytes(ranges, sizes)
    assert plan.placements == len(ranges)  # plain greedy reached it: nothing else ran


def test_the_search_stops_when_fixed_allocations_leave_nothing_to_win():
    """A graph's weights are fixed at the bottom of its arena: once the
    buffers sit at their peak right above them, no order can do better."""
    steps, sizes = steps_chain(8, 1024)
    ranges = live_ranges(steps)
    weights = [Allocation(f"w{i}", i * 4096, 4096) for i in range(4)]
    plan = place(ranges, sizes, fixed=weights, strategy="best")
    assert plan.size == 4 * 4096 + peak_live_bytes(ranges, sizes)
    assert plan.placements == len(ranges)


def test_the_default_stops_within_its_gap_of_the_floor():
    """Weights fixed with a small hole that no order can use: best searches
    on, the default takes plain greedy's plan, 0.01% above the floor."""
    steps, sizes = steps_chain(8, 1 << 20)
    ranges = live_ranges(steps)
    weights = [Allocation("w0", 0, 1 << 30), Allocation("w1", (1 << 30) + 4096, 1 << 30)]
    default = place(ranges, sizes, fixed=weights)
    best = place(ranges, sizes, fixed=weights, strategy="best")
    assert default.placements == len(ranges) < best.placements
    floor = (2 << 30) + peak_live_bytes(ranges, sizes)
    assert floor < default.size <= floor * (1 + DEFAULT_GAP)


def test_no_plan_beats_the_fixed_bytes_plus_the_peak():
    rng = random.Random(3)
    for _ in range(20):
        ranges, sizes = random_instance(rng, 40, 30, 5000)
        weights = [Allocation("a", 0, 3000), Allocation("b", 5000, 1000), Allocation("c", 9000, 10)]
        plan = place(ranges, sizes, alignment=1, fixed=weights, strategy="best")
        check(plan, ranges, sizes)
        assert plan.size >= max(9010, 4010 + peak_live_bytes(ranges, sizes))


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_the_default_plans_every_real_trace_within_half_a_percent_of_the_bound(name):
    ranges, sizes = load_instance(DATA / f"{name}.csv")
    plan = place(ranges, sizes, alignment=1)
    check(plan, ranges, sizes)
    assert plan.size <= 1.005 * peak_live_bytes(ranges, sizes)


def test_plans_do_not_depend_on_mapping_order():
    rng = random.Random(11)
    ranges, sizes = random_instance(rng, 120, 30, 1000)
    shuffled = list(ranges)
    rng.shuffle(shuffled)
    for strategy in ("greedy", "auto", "best"):
        first = place(ranges, sizes, strategy=strategy)
        again = place({n: ranges[n] for n in shuffled}, sizes, strategy=strategy)
        assert first == again


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"strategy": "fastest"}, ValueError, "strategy must be one of"),
        ({"alignment": 0}, ValueError, "alignment must be >= 1, got 0"),
        ({"alignment": 1.5}, TypeError, "alignment must be an int, got float"),
        ({"sizes": {}}, ValueError, "no size given for buffer 'a'"),
        ({"sizes": {"a": -1}}, ValueError, "size of 'a' must be >= 0, got -1"),
        ({"ranges": {"a": (0, 1)}}, TypeError, "range of 'a' must be a LiveRange, got tuple"),
        ({"fixed": [Allocation("a", 0, 8)]}, ValueError, "fixed allocation 'a' is also in ranges"),
        ({"fixed": [("w", 0, 8)]}, TypeError, "fixed entries must be Allocation"),
        ({"budget": -1}, ValueError, r"budget must be >= 0 \(buffer placements\) or None, got -1"),
        ({"gap": -0.1}, ValueError, r"gap must be a finite share >= 0, got -0.1"),
        ({"gap": float("nan")}, ValueError, r"gap must be a finite share >= 0, got nan"),
        ({"budget": 2.0}, TypeError, "budget must be an int, got float"),
        ({"budget": True}, TypeError, "budget must be an int, got bool"),
    ],
)
def test_bad_input_is_refused_by_name(kwargs, error, message):
    arguments = {"ranges": {"a": LiveRange(0, 1)}, "sizes": {"a": 8}, **kwargs}
    with pytest.raises(error, match=f"place: {message}"):
        place(**arguments)
