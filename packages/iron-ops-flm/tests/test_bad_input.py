"""Bad input to FLMGemm: wrong types and absurd sizes are refused at once,
naming the operator, the parameter and the rule; a large but valid M
validates in a few slab tries, not one per unit."""

import itertools

import pytest

from iron.core import Device, OperatorError
from iron.ops.flm.gemm import FLMGemm
from iron.ops.flm.schedule import Slab, plan_slabs


@pytest.mark.parametrize(
    "params, rule",
    [
        ({"M": "abc"}, "FLMGemm: M='abc': must be an int"),
        ({"M": 256.0}, "FLMGemm: M=256.0: must be an int"),
        ({"N": True}, "FLMGemm: N=True: must be an int"),
        ({"M": 2**40}, r"FLMGemm: A \(1099511627776, 512\) is .* at most 1099511627776 \(1 TiB\)"),
    ],
)
def test_wrong_types_and_absurd_sizes_are_refused(params, rule):
    with pytest.raises(OperatorError, match=rule):
        FLMGemm(**{"M": 256, "K": 512, "N": 1024, **params})


def test_a_large_valid_m_tries_few_slab_cuts(monkeypatch):
    """Counted, not timed: the search starts at the fewest slabs that can
    fit, so a large M builds about one cut's slabs, not one cut per count."""
    from iron.ops.flm import schedule

    built = []

    def counted(*args, **kwargs):
        built.append(args)
        return Slab(*args, **kwargs)

    monkeypatch.setattr(schedule, "Slab", counted)
    op = FLMGemm(M=2**29, K=512, N=1024).resolve(Device.from_name("npu2"))
    slabs = op.program(Device.from_name("npu2")).slabs
    assert len(built) <= 4 * len(slabs) + 4, (len(built), len(slabs))


def every_count(units, k_iters, pool_slots, device, resident=True):
    """plan_slabs as it was: every slab count from 1 up."""
    most = device.task_queue_depth * device.max_repeat_count
    keep = resident and k_iters <= pool_slots

    def make(first, n):
        if keep and n <= device.max_lock_value:
            return Slab(first, n, True, b_slots=k_iters, b_uses=n, fill_passes=1, drain_passes=n)
        b_slots = max(s for s in range(1, pool_slots + 1) if n * k_iters % s == 0)
        passes = n * k_iters // b_slots
        return Slab(first, n, False, b_slots, 1, passes, passes)

    def fits(slab):
        passes = max(slab.fill_passes, slab.drain_passes)
        return passes <= most and slab.units <= device.shim_max_iterations

    if pool_slots < 1 or not fits(make(0, 1)):
        return None
    for n_slabs in range(1, units + 1):
        size, extra = divmod(units, n_slabs)
        sizes = [size + (i < extra) for i in range(n_slabs)]
        slabs = [make(f, n) for f, n in zip(itertools.accumulate(sizes, initial=0), sizes)]
        if all(map(fits, slabs)) and (not keep or all(s.resident for s in slabs)):
            return tuple(slabs)
    return None


@pytest.mark.parametrize("units", [1, 2, 63, 64, 127, 500, 2000])
@pytest.mark.parametrize("k_iters, pool_slots", [(2, 4), (8, 4), (64, 2), (300, 1)])
@pytest.mark.parametrize("resident", [True, False])
def test_starting_the_slab_search_higher_changes_no_plan(units, k_iters, pool_slots, resident):
    device = Device.from_name("npu2")
    assert plan_slabs(units, k_iters, pool_slots, device, resident) == every_count(
        units, k_iters, pool_slots, device, resident
    )
