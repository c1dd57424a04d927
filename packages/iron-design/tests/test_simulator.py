"""`Simulator`: a design run many times, replaying the machine's record.
Every replay must give what a fresh `simulate` gives on the same data."""

import gc
import importlib
import weakref

import numpy as np
import pytest
from every_design import local_designs
from sim_designs import (
    accumulate_model,
    kernel,
    one_worker,
    running_sum_worker,
    scale_model,
)
from test_offset_param import NPU2, windowed

from iron.core import Device
from iron.core.spec import OUT
from iron.core.testing import random_array
from iron.design import examples
from iron.design.model import (
    Acquire,
    Call,
    Loop,
    Memref,
    Obj,
    Param,
    Release,
    Scalar,
    element_type,
)
from iron.design.simulate import (
    DeadlockError,
    KernelError,
    OutOfBoundsError,
    Simulator,
    simulate,
)

#: the module (the package's `simulate` names the function)
simulate_module = importlib.import_module("iron.design.simulate")
#: the local designs that run (two_pools is the emitter's: it pushes no pool task)
LOCAL = {key: design for key, design in local_designs() if not key.endswith("two_pools")}


def inputs(design, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        t.name: random_array(rng, t.shape, element_type(t.dtype).numpy)
        for t in design.tensors
        if t.direction is not OUT
    }


@pytest.fixture
def machine_runs(monkeypatch):
    """How many times the machine ran (a replay does not run it)."""
    runs = []
    real = simulate_module._Machine.run

    def counted(self):
        runs.append(self.design.name)
        return real(self)

    monkeypatch.setattr(simulate_module._Machine, "run", counted)
    return runs


@pytest.mark.parametrize("key", sorted(LOCAL))
def test_a_replay_gives_what_a_fresh_run_gives(key, machine_runs):
    design = LOCAL[key]
    simulator = Simulator(design)
    for seed in range(3):
        given = inputs(design, seed)
        replayed, fresh = simulator.run(given), simulate(design, given)
        for name, array in fresh.tensors.items():
            np.testing.assert_array_equal(replayed[name], array, err_msg=f"{key}: {name}")
        assert replayed.traffic == fresh.traffic
    assert len(machine_runs) == 1 + 3  # one recording, then replays; one per simulate


def test_a_replay_starts_from_garbage_again(npu1):
    """Slots and local buffers are garbage at the start of every run, as in
    a fresh one: a replay that kept the last run's memory would add to it."""
    garbage = np.int32(0x5A5A5A5A)
    x = np.arange(2048, dtype=np.int32)
    totals = Simulator(
        one_worker(npu1, (), workers=(running_sum_worker(256, None),), n=2048, tile=256)
    )
    body = (
        Acquire("in"),
        Acquire("out"),
        Call(kernel(accumulate_model, 256), (Obj("in"), Obj("out"), 256)),
        Release("in"),
        Release("out"),
    )
    adds = Simulator(one_worker(npu1, body, n=2048, tile=256))
    running = np.cumsum(x.reshape(-1, 256), axis=0, dtype=np.int32).reshape(-1)
    for _ in range(3):
        np.testing.assert_array_equal(totals.run({"x": x})["y"], running + garbage)
        y = adds.run({"x": x})["y"].reshape(-1, 256)
        np.testing.assert_array_equal(y[:2], x.reshape(-1, 256)[:2] + garbage)
    zeroed = Simulator(
        one_worker(npu1, (), workers=(running_sum_worker(256, 0),), n=2048, tile=256)
    )
    for _ in range(2):
        np.testing.assert_array_equal(zeroed.run({"x": x})["y"], running)


def test_parameters_that_steer_are_recorded_apart_and_kernel_scalars_replayed(npu1, machine_runs):
    body = (
        Loop(
            Param("tiles"),
            (
                Acquire("in"),
                Acquire("out"),
                Call(kernel(scale_model, 1024), (Obj("in"), Obj("out"), Param("factor"))),
                Release("in"),
                Release("out"),
            ),
        ),
    )
    simulator = Simulator(one_worker(npu1, body, forever=False, params=("tiles", "factor")))
    assert simulator.steering == ("tiles",)
    x = inputs(simulator.design, 0)["x"]
    for factor in (-3, 5, 7):
        y = simulator.run({"x": x}, {"tiles": 4, "factor": factor})["y"]
        np.testing.assert_array_equal(y, x * factor)
    assert len(machine_runs) == 1
    with pytest.raises(DeadlockError, match="waits on the consumer lock of fifo in"):
        simulator.run({"x": x}, {"tiles": 5, "factor": 1})
    with pytest.raises(DeadlockError):  # a failed run leaves no record: it fails again
        simulator.run({"x": x}, {"tiles": 5, "factor": 1})
    assert len(machine_runs) == 3


def test_each_offset_is_recorded_and_only_the_last_records_are_kept(machine_runs):
    """A task offset steers the machine: each value is its own record, and
    an offset past the tensor is refused on a replay's simulator too."""
    simulator = Simulator(windowed(NPU2))
    assert simulator.steering == ("start",)
    x = np.arange(1024, dtype=np.int32)
    starts = range(0, (Simulator.KEPT + 2) * 64, 64)
    for start in [*starts, *reversed(starts)]:
        y = simulator.run({"x": x}, {"start": start})["y"]
        np.testing.assert_array_equal(y, x[start : start + 256])
    # the first pass recorded each, keeping the last KEPT; coming back, those
    # replayed and the first two, dropped, were recorded again
    assert len(machine_runs) == len(starts) + 2
    assert list(simulator._replays) == [(s,) for s in reversed(starts[:-2])]
    with pytest.raises(OutOfBoundsError, match=r"at start=769: .* reaches element 1024"):
        simulator.run({"x": x}, {"start": 769})


def negative_is_an_error(x, y, n):
    if (x[:n] < 0).any():
        raise ValueError("a negative input")
    y[:n] = x[:n]


def test_a_kernel_that_raises_on_replayed_data_is_named(npu1):
    line = Memref((1024,), "i32")
    checked = kernel(negative_is_an_error, 1024)
    assert checked.args == (line, line, Scalar("i32"))
    body = (
        Acquire("in"),
        Acquire("out"),
        Call(checked, (Obj("in"), Obj("out"), 1024)),
        Release("in"),
        Release("out"),
    )
    design = one_worker(npu1, body)
    simulator = Simulator(design)
    x = np.arange(4096, dtype=np.int32)
    np.testing.assert_array_equal(simulator.run({"x": x})["y"], x)
    x[3000] = -1  # in the third object
    with pytest.raises(KernelError) as fresh:
        simulate(design, {"x": x})
    with pytest.raises(KernelError) as replayed:
        simulator.run({"x": x})
    assert str(replayed.value) == str(fresh.value)
    assert "worker adder, iteration 3: call 1 of 1 (negative_is_an_error)" in str(fresh.value)


def test_a_simulator_refuses_what_is_not_a_design():
    with pytest.raises(TypeError, match=r"^Simulator: design must be an iron\.design\.Design"):
        Simulator("add_one")
    npu2 = Device.from_name("npu2")
    simulator = Simulator(examples.add_one(npu2))
    with pytest.raises(ValueError, match="design add_one has no tensor 'z'"):
        simulator.run({"x": np.zeros(4096, np.int32), "z": np.zeros(1)})


def test_a_record_keeps_no_runs_tensors(npu1):
    """A simulator held by a device library must not hold every step's data."""
    simulator = Simulator(examples.add_one(npu1))
    for _ in range(2):  # the recording run, then a replay
        run = simulator.run({"x": np.arange(4096, dtype=np.int32)})
        kept = [weakref.ref(array) for array in run.tensors.values()]
        del run
        gc.collect()
        assert [r() for r in kept] == [None, None]


def test_a_pattern_too_long_to_hold_whole_is_not_recorded(npu1, machine_runs, monkeypatch):
    """The transpose's fill walks a pattern computed a piece at a time past
    `Walk.WHOLE` visits: a record would hold all of it, so none is kept."""
    monkeypatch.setattr(simulate_module.Walk, "WHOLE", 1000)
    simulator = Simulator(examples.transpose(npu1, 64, 64))
    x = np.arange(64 * 64, dtype=np.int32).reshape(64, 64)
    for _ in range(2):
        np.testing.assert_array_equal(simulator.run({"x": x})["y"], x.T)
    assert len(machine_runs) == 2 and not simulator._replays
