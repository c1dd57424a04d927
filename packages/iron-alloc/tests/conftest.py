"""Shared test fixtures: an independent reference planner."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: takes more than a few seconds (run by the slow session)"
    )
    config.addinivalue_line("markers", "bench: a benchmark's smoke run (run by the bench session)")


def _reference_greedy(ranges, sizes, alignment=1):
    """A deliberately plain greedy-by-size best-fit planner (TFLite's
    GreedyBySizeAssignment as published), to check the fast one against."""
    order = sorted(ranges, key=lambda n: (-sizes[n], ranges[n].begin, n))
    placed = []  # (offset, end, range)
    offsets = {}
    for name in order:
        live, size = ranges[name], sizes[name]
        obstacles = sorted((o, e) for o, e, other in placed if other.overlaps(live))
        cursor, best, best_gap = 0, None, None
        for offset, end in obstacles:
            gap = offset - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, -(-end // alignment) * alignment)
        offsets[name] = cursor if best is None else best
        placed.append((offsets[name], offsets[name] + size, live))
    return offsets


@pytest.fixture(scope="session")
def reference_greedy():
    return _reference_greedy
