"""Random small designs hold check, the emitter and the simulator to one
meaning: fifos between the shim, a memtile (a forward, a split and a join,
with gaps between the lanes) and cores, workers in loops, fills and drains
with random access patterns, depths, groups and waits.

- Whenever `check` passes, `to_mlir` succeeds and `simulate` either
  finishes (so every output element was written exactly once: the simulator
  refuses anything else) with the values numpy gives, or raises a named
  `SimulationError`.
- Whenever `check` fails, each violation names its rule, tile and subject,
  and the emitter and simulator fail with their own named errors, if at all.
"""

from __future__ import annotations

import contextlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iron.core import Device
from iron.core.spec import IN, OUT
from iron.design import (
    TAP,
    Acquire,
    Call,
    Design,
    DesignError,
    Drain,
    Fill,
    Finish,
    Kernel,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Release,
    SimulationError,
    Tensor,
    Worker,
    check,
    core,
    forward,
    join,
    memtile,
    shim,
    shipped,
    simulate,
    split,
    to_mlir,
)

DEVICES = {name: Device.from_name(name) for name in ("npu1", "npu2")}


def add_one_model(x: np.ndarray, y: np.ndarray) -> None:
    y[:] = x + x.dtype.type(1)


def _kernel(size: int, dtype: str) -> Kernel:
    line = Memref((size,), dtype)
    return Kernel(f"add_one_{dtype}_{size}", (line, line), shipped("tests", "a.cc"), add_one_model)


def _factor(draw, n: int) -> tuple[int, int]:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    rows = draw(st.sampled_from(divisors))
    return rows, n // rows


@st.composite
def _tap(draw, n: int, start: int = 0):
    """A pattern over elements start..start+n-1 of a tensor, each once:
    linear, or a (rows, cols) block read column by column, possibly split
    into an iteration dimension; now and then a wrong one."""
    kind = draw(st.sampled_from(["linear", "linear", "transpose", "broken"]))
    if kind == "linear":
        return TAP.linear(n, start), np.arange(start, start + n)
    rows, cols = _factor(draw, n)
    if kind == "broken":  # a stride that reads past the block, or a partial object
        return TAP(start, (cols, rows), (1, cols + 1)), None
    order = (np.arange(n).reshape(rows, cols).T.reshape(-1)) + start
    return TAP(start, (cols, rows), (1, cols)), order


@st.composite
def designs(draw):
    device = DEVICES[draw(st.sampled_from(sorted(DEVICES)))]
    dtype = draw(st.sampled_from(["i32", "i32", "i16", "bf16"]))
    lanes = draw(st.integers(1, 3))
    size = draw(st.sampled_from([8, 16, 32]))  # elements of a core's object
    per_lane = draw(st.integers(1, 2))  # objects of a lane per memtile object (a gap's worth)
    route = draw(st.sampled_from(["direct", "forward", "linked"])) if lanes == 1 else "linked"
    objects = draw(st.integers(1, 4))  # memtile objects the run moves
    depth = lambda: draw(st.integers(1, 3))  # noqa: E731
    big = lanes * per_lane * size  # a memtile object
    n = objects * big if route == "linked" else objects * size * per_lane
    fifos, workers, links = [], [], []
    source, sink = "x_in", "y_out"
    if route == "linked":
        offsets = [i * per_lane * size for i in range(lanes)]
        fifos += [
            ObjectFifo(source, big, dtype, shim(), (memtile("scatter"),), depth=depth()),
            ObjectFifo(sink, big, dtype, memtile("gather"), (shim(),), depth=depth()),
        ]
        links += [
            split("scatter", source, [f"in{i}" for i in range(lanes)], offsets),
            join("gather", [f"out{i}" for i in range(lanes)], sink, offsets),
        ]
        lane_ends = [(memtile("scatter"), memtile("gather"))] * lanes
    elif route == "forward":
        fifos.append(
            ObjectFifo(source, size * per_lane, dtype, shim(), (memtile("fwd"),), depth=depth())
        )
        links.append(forward("fwd", source, "in0"))
        lane_ends = [(memtile("fwd"), shim())]
    else:
        lane_ends = [(shim(), shim())]
    runs = n // lanes // size  # objects each worker handles
    for i, (producer, consumer) in enumerate(lane_ends):
        fifos += [
            ObjectFifo(f"in{i}", size, dtype, producer, (core(f"w{i}", depth=draw(st.sampled_from([None, 1, 2, 3]))),), depth=depth()),
            ObjectFifo(f"out{i}", size, dtype, core(f"w{i}"), (consumer,), depth=depth()),
        ]  # fmt: skip
        step = (
            Acquire(f"in{i}"),
            Acquire(f"out{i}"),
            Call(_kernel(size, dtype), (Obj(f"in{i}"), Obj(f"out{i}"))),
            Release(f"in{i}"),
            Release(f"out{i}"),
        )
        shape = draw(st.sampled_from(["forever", "loop", "once"]))
        if shape == "forever":
            workers.append(Worker(f"w{i}", step))
            continue
        # a worker that runs once may run too few or too many times: a deadlock
        count = runs if shape == "loop" else draw(st.sampled_from([runs, runs, runs - 1, runs + 1]))
        body = (Loop(count, step),) if count != 1 else step
        workers.append(Worker(f"w{i}", body, forever=False))
    if route == "direct":
        source, sink = "in0", "out0"
    elif route == "forward":
        sink = "out0"
    pieces = draw(st.sampled_from([d for d in (1, 2, 4) if objects % d == 0]))
    chunk = n // pieces
    expected = np.empty(n, np.int64)
    sequence = []
    grouped = draw(st.booleans())
    for p in range(pieces):
        group = f"g{p}" if grouped else "default"
        fill, fill_order = draw(_tap(chunk, p * chunk))
        drain, drain_order = draw(_tap(chunk, p * chunk))
        sequence.append(Fill(source, "x", fill, wait=draw(st.booleans()), group=group))
        sequence.append(
            Drain(sink, "y", drain, wait=draw(st.booleans()) or p == pieces - 1, group=group)
        )
        if grouped and draw(st.booleans()):
            sequence.append(Finish(group))
        if expected is not None and fill_order is not None and drain_order is not None:
            expected[drain_order] = fill_order
        else:
            expected = None
    design = Design(
        "random",
        device,
        (Tensor("x", n, dtype, IN), Tensor("y", n, dtype, OUT)),
        tuple(fifos),
        tuple(workers),
        tuple(sequence),
        links=tuple(links),
    )
    return design, expected


def _input(design) -> np.ndarray:
    tensor = design.tensor("x")
    values = (np.arange(tensor.size) % 97) - 40
    dtype = {"i32": np.int32, "i16": np.int16, "bf16": ml_dtypes.bfloat16}[tensor.dtype]
    return values.astype(dtype)


def _property(case) -> None:
    design, expected = case
    report = check(design)
    x = _input(design)
    if report.ok:
        text = to_mlir(design)  # check passed: the emitter never refuses
        assert "aie.runtime_sequence" in text
        try:
            run = simulate(design, {"x": x})
        except SimulationError:
            return
        if expected is not None:
            want = (x.astype(np.float64)[expected] + 1).astype(x.dtype)
            np.testing.assert_array_equal(run["y"], want)
        return
    for v in report.violations:
        assert v.rule and v.design == "random", v
        assert str(v).startswith("random: ")
    with contextlib.suppress(DesignError):
        to_mlir(design)
    with contextlib.suppress(SimulationError, ValueError):
        simulate(design, {"x": x})


SETTINGS = dict(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@settings(max_examples=60, **SETTINGS)
@given(designs())
def test_check_emit_and_simulate_agree_on_random_designs(case):
    _property(case)


@pytest.mark.slow
@settings(max_examples=600, **SETTINGS)
@given(designs())
def test_check_emit_and_simulate_agree_on_many_random_designs(case):
    _property(case)
