"""Properties of plans made from random step lists (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from iron.alloc import check, live_ranges, peak_live_bytes, place

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
@given(graphs(), st.sampled_from([1, 64]), st.sampled_from(["greedy", "best"]))
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
@given(graphs())
def test_fast_greedy_matches_the_plain_reference(reference_greedy, graph):
    steps, sizes = graph
    ranges = live_ranges(steps)
    sizes = {n: max(sizes[n], 1) for n in ranges}
    assert place(ranges, sizes, alignment=1, strategy="greedy").offsets == reference_greedy(
        ranges, sizes
    )
