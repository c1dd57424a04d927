"""The block index gives exactly the offsets of the scan and of the plain reference."""

import random
from pathlib import Path

import numpy as np
import pytest

import iron.alloc.blocks as blocks_module
import iron.alloc.greedy as greedy_module
from iron.alloc import Allocation, LiveRange, check, place
from iron.alloc.bench import load_instance
from iron.alloc.blocks import blocked_offsets
from iron.alloc.greedy import scan_offsets

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
NO_FIXED = np.zeros(0, np.int64)


def random_arrays(rng, n, horizon):
    """Ranges with some heavy steps (many buffers starting or ending together)."""
    begin = np.array([rng.randrange(horizon) for _ in range(n)], np.int64)
    for _ in range(rng.randrange(3)):
        begin[rng.sample(range(n), n // 4)] = rng.randrange(horizon)
    life = np.array([rng.choice([0, 0, 1, 2, 5, 20, 80]) for _ in range(n)], np.int64)
    end = np.minimum(horizon, begin + life)
    size = np.array([rng.choice([1, 5, 64, 100, 4096, rng.randrange(1, 5000)]) for _ in range(n)])
    return begin, end, size.astype(np.int64)


@pytest.mark.parametrize("block_events", [2, 5, 64])
@pytest.mark.parametrize("alignment", [1, 64])
def test_blocks_equal_the_plain_reference(monkeypatch, reference_greedy, block_events, alignment):
    monkeypatch.setattr(greedy_module, "DENSE_LIVE", 0)  # every graph takes the block index
    monkeypatch.setattr(blocks_module, "BLOCK_EVENTS", block_events)
    rng = random.Random(block_events * alignment)
    for trial in range(15):
        begin, end, size = random_arrays(rng, 5 + 12 * trial, 40)
        names = [f"b{k}" for k in range(len(size))]
        ranges = {n: LiveRange(int(b), int(e)) for n, b, e in zip(names, begin, end, strict=True)}
        sizes = dict(zip(names, size.tolist(), strict=True))
        plan = place(ranges, sizes, alignment=alignment, strategy="greedy")
        assert plan.offsets == reference_greedy(ranges, sizes, alignment)


@pytest.mark.parametrize("block_events", [2, 7, 64])
def test_blocks_equal_the_scan_for_any_order_fit_and_fixed(monkeypatch, block_events):
    monkeypatch.setattr(blocks_module, "BLOCK_EVENTS", block_events)
    rng = random.Random(block_events)
    for trial in range(40):
        begin, end, size = random_arrays(rng, rng.randrange(1, 150), rng.choice([3, 30, 200]))
        order = np.array(rng.sample(range(len(size)), len(size)), np.int64)
        fixed_offset, fixed_end = NO_FIXED, NO_FIXED
        if trial % 3 == 0:
            fixed_offset, fixed_end = np.array([0, 900]), np.array([100, 1000])
        for alignment in (1, 8):
            for best_fit in (True, False):
                args = (begin, end, size, order, alignment, fixed_offset, fixed_end, best_fit)
                assert np.array_equal(blocked_offsets(*args), scan_offsets(*args))


@pytest.mark.parametrize("instance", ["somas_resnet50", "iopddl_G_1"])
def test_blocks_equal_the_scan_on_dense_traces(instance):
    ranges, sizes = load_instance(DATA / f"{instance}.csv")
    names = sorted(ranges)
    begin = np.array([ranges[n].begin for n in names], np.int64)
    end = np.array([ranges[n].end for n in names], np.int64)
    size = np.array([sizes[n] for n in names], np.int64)
    order = np.lexsort((np.arange(len(size)), begin, -size))
    for alignment in (1, 64):
        args = (begin, end, size, order, alignment, NO_FIXED, NO_FIXED, True)
        assert np.array_equal(blocked_offsets(*args), scan_offsets(*args))


@pytest.mark.slow
@pytest.mark.parametrize("instance", ["somas_pangu_2.6B", "iopddl_S_1", "iopddl_Y_1"])
def test_blocks_equal_the_scan_on_large_traces(instance):
    test_blocks_equal_the_scan_on_dense_traces(instance)


def test_dense_graphs_take_the_block_index(monkeypatch):
    calls = []

    def spy(*args):
        calls.append(len(args[3]))
        return blocked_offsets(*args)

    monkeypatch.setattr(greedy_module, "blocked_offsets", spy)
    sparse = {f"b{k}": LiveRange(k, k + 1) for k in range(200)}  # two live at a step
    dense = {f"b{k}": LiveRange(k, k + 100) for k in range(200)}  # about 70 live at a step
    sizes = {f"b{k}": 64 for k in range(200)}
    for ranges in (sparse, dense):
        plan = place(ranges, sizes, strategy="greedy")
        check(plan, ranges, sizes)
    assert calls == [200]


def test_blocks_keep_fixed_allocations_and_heavy_steps_apart(monkeypatch):
    monkeypatch.setattr(blocks_module, "BLOCK_EVENTS", 4)
    monkeypatch.setattr(greedy_module, "DENSE_LIVE", 0)
    # forty buffers start at step 0 (a heavy step); a fixed allocation sits at [0, 256)
    ranges = {f"b{k}": LiveRange(0, k % 5) for k in range(40)}
    ranges.update({f"c{k}": LiveRange(k, k + 2) for k in range(1, 10)})
    sizes = {name: 64 for name in ranges}
    plan = place(ranges, sizes, fixed=[Allocation("w", 0, 256)], strategy="greedy")
    check(plan, ranges, sizes)
    assert min(plan.offsets.values()) == 256
    assert plan.size == 256 + 40 * 64  # the forty share step 0, the rest reuse their bytes
