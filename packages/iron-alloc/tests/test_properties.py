"""Properties of plans made from random step lists (hypothesis)."""

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iron.alloc import (
    Allocation,
    LiveRange,
    OverlapError,
    Plan,
    check,
    live_ranges,
    peak_live_bytes,
    place,
)

NAMES = [f"v{k}" for k in range(24)]


@st.composite
def graphs(draw):
    """Random step lists over a small name pool: reads and writes may repeat,
    read before write, or never be read, as in real graphs; and a size per name."""
    n_steps = draw(st.integers(0, 30))
    steps = []
    for _ in range(n_steps):
        reads = draw(st.lists(st.sampled_from(NAMES), max_size=3))
        writes = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=2))
        steps.append((reads, writes))
    sizes = {name: draw(st.integers(0, 5000)) for name in NAMES}
    return steps, sizes


@settings(max_examples=150, deadline=None)
@given(graphs(), st.sampled_from([1, 64]), st.sampled_from(["greedy", "auto", "best"]))
def test_plans_are_safe_bounded_and_deterministic(graph, alignment, strategy):
    steps, sizes = graph
    ranges = live_ranges(steps)
    plan = place(ranges, sizes, alignment=alignment, strategy=strategy)
    check(plan, ranges, sizes)
    assert plan.size >= peak_live_bytes(ranges, sizes)
    assert plan.size <= sum(-(-sizes[n] // alignment) * alignment for n in ranges)
    if alignment == 1:
        assert plan.size <= sum(sizes[n] for n in ranges)
    assert place(ranges, sizes, alignment=alignment, strategy=strategy) == plan


@settings(max_examples=100, deadline=None)
@given(graphs(), st.sampled_from([1, 64]), st.integers(0, 400), st.integers(0, 400))
def test_the_default_search_is_anytime(graph, alignment, budget, more):
    """A budget buys a prefix of one fixed sequence of passes: never worse than
    greedy, never worse with more budget, and once the budget is not used up
    the plan is that of "best" (with no gap to stop at early)."""
    steps, sizes = graph
    ranges = live_ranges(steps)
    greedy = place(ranges, sizes, alignment=alignment, strategy="greedy")
    small = place(ranges, sizes, alignment=alignment, budget=budget, gap=0)
    large = place(ranges, sizes, alignment=alignment, budget=budget + more, gap=0)
    check(small, ranges, sizes)
    check(large, ranges, sizes)
    assert large.size <= small.size <= greedy.size
    assert place(ranges, sizes, alignment=alignment, budget=budget, gap=0) == small
    best = place(ranges, sizes, alignment=alignment, strategy="best")
    if best.placements <= budget:
        assert small == large == best


@settings(max_examples=100, deadline=None)
@given(graphs())
def test_fast_greedy_matches_the_plain_reference(reference_greedy, graph):
    steps, sizes = graph
    ranges = live_ranges(steps)
    sizes = {n: max(sizes[n], 1) for n in ranges}
    assert place(ranges, sizes, alignment=1, strategy="greedy").offsets == reference_greedy(
        ranges, sizes
    )


@st.composite
def placed(draw):
    """Buffers at arbitrary aligned offsets (often colliding) with ranges and
    sizes, and fixed allocations: what a buggy planner might hand `check`."""
    alignment = draw(st.sampled_from([1, 4]))
    names = [f"b{k}" for k in range(draw(st.integers(0, 8)))]
    ranges, sizes, offsets = {}, {}, {}
    for name in names:
        begin = draw(st.integers(0, 6))
        ranges[name] = LiveRange(begin, draw(st.integers(begin, 6)))
        sizes[name] = draw(st.integers(0, 12))
        offsets[name] = alignment * draw(st.integers(0, 32 // alignment))
    fixed = tuple(
        Allocation(f"f{k}", draw(st.integers(0, 40)), draw(st.integers(0, 12)))
        for k in range(draw(st.integers(0, 3)))
    )
    top = max([offsets[n] + sizes[n] for n in names] + [a.end for a in fixed], default=0)
    return Plan(offsets, top, alignment=alignment, fixed=fixed), ranges, sizes


def collisions(plan, ranges, sizes) -> set[frozenset[str]]:
    """Every pair that shares a byte at some step, by brute force: fixed
    allocations hold their bytes at every step."""
    spans = {n: (plan.offsets[n], plan.offsets[n] + sizes[n], ranges[n]) for n in ranges}
    spans |= {a.name: (a.offset, a.end, None) for a in plan.fixed}
    found = set()
    for a, b in itertools.combinations(spans, 2):
        (lo_a, hi_a, live_a), (lo_b, hi_b, live_b) = spans[a], spans[b]
        share_bytes = max(lo_a, lo_b) < min(hi_a, hi_b)
        share_step = live_a is None or live_b is None or live_a.overlaps(live_b)
        if share_bytes and share_step:
            found.add(frozenset((a, b)))
    return found


@settings(max_examples=400, deadline=None)
@given(placed())
def test_check_finds_an_overlap_exactly_when_brute_force_does(case):
    plan, ranges, sizes = case
    expected = collisions(plan, ranges, sizes)
    if not expected:
        check(plan, ranges, sizes)
        return
    with pytest.raises(OverlapError) as caught:
        check(plan, ranges, sizes)
    named = frozenset(re.findall(r"'(\w+)' \(", str(caught.value)))
    assert named in expected, str(caught.value)
