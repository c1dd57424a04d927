"""Kernel models with a batch form (iron.design.kernel_batch), and replays
that hand them runs of calls (iron.design.replay): the same results as a
fresh run, bit for bit, and every corruption of a design still shows."""

import importlib

import attrs
import numpy as np
import pytest
from sim_designs import one_worker

from iron.core.spec import IN, OUT
from iron.design import (
    TAP,
    Acquire,
    Buf,
    Call,
    Drain,
    Fill,
    Kernel,
    LocalBuffer,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    Release,
    Scalar,
    Tensor,
    Worker,
    core,
    examples,
    shim,
    shipped,
)
from iron.design.kernel_batch import batch_of, batched, check_batch, run_batch
from iron.design.replay import CALL, CAPTURE, FLUSH, WRITE, WRITE_TO
from iron.design.simulate import KernelError, Simulator, simulate

replay_module = importlib.import_module("iron.design.replay")

# ---- kernel models with batch forms (module level: designs name their models) ----------


def affine_model(x, y, n, shift):
    """y = 3 x + shift over the first n elements (int32, wrapping)."""
    y[:n] = x[:n] * np.int32(3) + np.int32(shift)


def _affine_rows(x, y, n, shift):
    return x * np.int32(3) + shift.astype(np.int32)[:, None]


def _write_first(row, x, y, n, shift):
    y[:n] = row[:n]


def _whole_line(x, y, n, shift):
    return n >= y.size


batched(
    affine_model,
    reads=(0,),
    writes=(1,),
    compute=_affine_rows,
    write=_write_first,
    whole=_whole_line,
)


def total_model(x, y, total):
    """Adds each object into `total` (read and written) and writes it out."""
    total += x
    y[:] = total


def _totals(x, y, total):
    return x + total


def _write_total(row, x, y, total):
    total[:] = row
    y[:] = row


batched(total_model, reads=(0, 2), writes=(1, 2), compute=_totals, write=_write_total)


def refusing_model(x, y, n, shift):
    """`affine_model`, refusing a negative input (as a kernel's assert would)."""
    if (x[:n] < 0).any():
        raise ValueError("a negative input")
    affine_model(x, y, n, shift)


def _refusing_rows(x, y, n, shift):
    if (x < 0).any():
        raise ValueError("a negative input")
    return _affine_rows(x, y, n, shift)


batched(refusing_model, reads=(0,), writes=(1,), compute=_refusing_rows, write=_write_first)


def sloppy_model(x, y, n, shift):
    affine_model(x, y, n, shift)


def _sloppy_rows(x, y, n, shift):  # forgets the shift of every call but the first
    return x * np.int32(3) + np.int32(shift[0])


batched(sloppy_model, reads=(0,), writes=(1,), compute=_sloppy_rows, write=_write_first)


def bias_model(x, b, y):
    y[:] = x + b


def _bias_rows(x, b, y):
    return x + b


def _write_all(row, x, b, y):
    y[:] = row


batched(bias_model, reads=(0, 1), writes=(2,), compute=_bias_rows, write=_write_all)


def kernel(model, tile: int) -> Kernel:
    line = Memref((tile,), "i32")
    args = (line, line, Scalar("i32"), Scalar("i32"))
    return Kernel(model.__name__, args, shipped("tests", f"{model.__name__}.cc"), model)


def affine_body(tile, shift, model=affine_model, source="in", sink="out"):
    return (
        Acquire(source),
        Acquire(sink),
        Call(kernel(model, tile), (Obj(source), Obj(sink), tile, shift)),
        Release(source),
        Release(sink),
    )


def inputs(n, seed=0):
    return np.random.default_rng(seed).integers(-(2**31), 2**31, n, dtype=np.int32)


def kinds(simulator):
    """How many events of each kind the (one) record's program has, a
    flush's waiting events counted too."""
    (record,) = simulator._replays.values()
    counts = {}

    def count(events):
        for event in events:
            counts[event[0]] = counts.get(event[0], 0) + 1
            if event[0] == FLUSH:
                count(event[2])

    count(record.program)
    return counts


# ---- the protocol ------------------------------------------------------------------------


def test_a_batch_form_is_found_through_a_partial_with_its_keywords():
    import functools

    assert batch_of(affine_model)[0].reads == (0,)
    bound = functools.partial(affine_model, shift=2)
    assert batch_of(bound)[1] == {"shift": 2}
    assert batch_of(functools.partial(affine_model, np.zeros(4, np.int32))) is None
    assert batch_of(one_worker) is None


def test_check_batch_passes_an_equal_form_and_catches_one_that_differs():
    x = [inputs(64, seed) for seed in range(4)]
    calls = [(x[i], np.zeros(64, np.int32), 48, i - 2) for i in range(4)]
    check_batch(affine_model, calls)
    with pytest.raises(AssertionError, match=r"sloppy_model.*call 1, argument 1"):
        check_batch(sloppy_model, calls)
    with pytest.raises(ValueError, match="has no batch form"):
        run_batch(one_worker, calls)
    ones = [(x[i], np.zeros(64, np.int32), 64 - i) for i in range(4)]
    check_batch(examples.add_one_model, ones)  # the example kernel's own form


# ---- replays that batch ------------------------------------------------------------------


@pytest.mark.parametrize("tile", [64, 256, 1024])
def test_a_replay_batches_the_calls_and_gives_what_a_fresh_run_gives(npu1, tile):
    design = one_worker(npu1, affine_body(tile, Param("shift")), tile=tile, params=("shift",))
    simulator = Simulator(design)
    for seed, shift in enumerate((7, -5, 2**30)):
        x = inputs(4096, seed)
        replayed = simulator.run({"x": x}, {"shift": shift})
        fresh = simulate(design, {"x": x}, {"shift": shift})
        np.testing.assert_array_equal(replayed["y"], x * np.int32(3) + np.int32(shift))
        np.testing.assert_array_equal(replayed["y"], fresh["y"])
        assert replayed.traffic == fresh.traffic
    counts = kinds(simulator)
    assert CALL not in counts  # every call batched: none is run alone
    assert counts[CAPTURE] == 1 and counts[FLUSH] == 1  # one run of rows, one flush
    assert counts[WRITE] == 4096 // tile


def test_a_call_that_reads_what_a_waiting_write_writes_flushes_first(npu1):
    """The second kernel reads the local buffer the first one writes, and the
    kernel with a total reads what its last call wrote: each must see the
    write before it."""
    tile = 256
    chain = (
        Acquire("in"),
        Acquire("out"),
        Call(kernel(affine_model, tile), (Obj("in"), Buf("mid"), tile, 1)),
        Call(kernel(affine_model, tile), (Buf("mid"), Obj("out"), tile, Param("shift"))),
        Release("in"),
        Release("out"),
    )
    line = Memref((tile,), "i32")
    totals = Kernel("total", (line, line, line), shipped("tests", "total.cc"), total_model)
    running = Worker(
        "adder",
        (
            Acquire("in"),
            Acquire("out"),
            Call(totals, (Obj("in"), Obj("out"), Buf("total"))),
            Release("in"),
            Release("out"),
        ),
        buffers=(LocalBuffer("total", (tile,), "i32", initial_value=0),),
    )
    mid = (LocalBuffer("mid", (tile,), "i32"),)
    x = inputs(2048)
    for design, expected in [
        (
            one_worker(npu1, (), tile=tile, n=2048, params=("shift",),
                       workers=(Worker("adder", chain, buffers=mid),)),
            (x * np.int32(3) + np.int32(1)) * np.int32(3) + np.int32(4),
        ),
        (
            one_worker(npu1, (), tile=tile, n=2048, params=("shift",), workers=(running,)),
            np.cumsum(x.reshape(-1, tile), axis=0, dtype=np.int32).reshape(-1),
        ),
    ]:  # fmt: skip
        simulator = Simulator(design)
        for _ in range(3):  # the record, then replays
            np.testing.assert_array_equal(simulator.run({"x": x}, {"shift": 4})["y"], expected)
        assert kinds(simulator)[FLUSH] >= 2048 // tile  # a flush a line at least: each reads one


def test_a_replay_with_an_object_held_across_calls_matches_a_fresh_run(npu1):
    """The worker holds one object of `bias` across a loop of calls, each
    taking a new line (as a GEMV core holds x): every call reads it."""
    tile, lines = 128, 16
    line = Memref((tile,), "i32")
    add_bias = Kernel("add_bias", (line, line, line), shipped("tests", "add_bias.cc"), bias_model)
    step = (
        Acquire("in"),
        Acquire("out"),
        Call(add_bias, (Obj("in"), Obj("bias"), Obj("out"))),
        Release("in"),
        Release("out"),
    )
    n = tile * lines
    design = one_worker(
        npu1,
        (Acquire("bias"), *(step * lines), Release("bias")),
        n=n,
        tile=tile,
        forever=False,
        tensors=(
            Tensor("x", n, "i32", IN),
            Tensor("b", tile, "i32", IN),
            Tensor("y", n, "i32", OUT),
        ),
        fifos=(
            ObjectFifo("in", tile, "i32", shim(), (core("adder"),)),
            ObjectFifo("bias", tile, "i32", shim(), (core("adder"),)),
            ObjectFifo("out", tile, "i32", core("adder"), (shim(),)),
        ),
        sequence=(
            Fill("bias", "b", TAP.linear(tile)),
            Fill("in", "x", TAP.linear(n)),
            Drain("out", "y", TAP.linear(n), wait=True),
        ),
    )
    simulator = Simulator(design)
    for seed in range(3):
        given = {"x": inputs(n, seed), "b": inputs(tile, seed + 10)}
        replayed, fresh = simulator.run(given), simulate(design, given)
        np.testing.assert_array_equal(replayed["y"], fresh["y"])
        np.testing.assert_array_equal(replayed["y"], given["x"] + np.tile(given["b"], lines))
    assert kinds(simulator)[FLUSH] == 1


# ---- corruptions still show --------------------------------------------------------------


def swapped_drains():
    return Drain("out", "y", TAP(2048, (2048,), (1,))), Drain("out", "y", TAP(0, (2048,), (1,)))


def short_call_body():
    """`affine_body` whose call leaves each line's last element unwritten."""
    acquires, releases = affine_body(256, 5)[:2], affine_body(256, 5)[3:]
    return (*acquires, Call(kernel(affine_model, 256), (Obj("in"), Obj("out"), 255, 5)), *releases)


def corrupted(design, change):
    return attrs.evolve(design, **change(design))


@pytest.mark.parametrize(
    "change",
    [
        # the fill walks x in another order: pairs of elements half the tensor apart
        lambda d: {"sequence": (Fill("in", "x", TAP(0, (2048, 2), (1, 2048))), d.sequence[1])},
        # the drain writes y's two halves swapped
        lambda d: {"sequence": (d.sequence[0], *swapped_drains())},
        # the kernel is called with another shift, or on part of each line
        lambda d: {"workers": (Worker("adder", affine_body(256, 6)),)},
        lambda d: {"workers": (Worker("adder", short_call_body()),)},
    ],
    ids=["fill order", "drain order", "kernel scalar", "kernel count"],
)
def test_a_corrupted_pattern_or_call_gives_a_wrong_answer_on_every_replay(npu1, change):
    design = one_worker(npu1, affine_body(256, 5), tile=256)
    x = np.arange(4096, dtype=np.int32)
    expected = x * np.int32(3) + np.int32(5)
    right = Simulator(design)
    wrong = Simulator(corrupted(design, change))
    for _ in range(3):  # the record, then replays
        np.testing.assert_array_equal(right.run({"x": x})["y"], expected)
        y = wrong.run({"x": x})["y"]
        assert not np.array_equal(y, expected)
        np.testing.assert_array_equal(y, simulate(wrong.design, {"x": x})["y"])


def test_a_batched_kernel_that_raises_on_replayed_data_is_named(npu1):
    design = one_worker(npu1, affine_body(1024, 0, refusing_model))
    simulator = Simulator(design)
    x = np.arange(4096, dtype=np.int32)
    np.testing.assert_array_equal(simulator.run({"x": x})["y"], 3 * x)
    x[3000] = -1  # in the third object
    with pytest.raises(KernelError) as fresh:
        simulate(design, {"x": x})
    with pytest.raises(KernelError) as replayed:
        simulator.run({"x": x})
    assert str(replayed.value) == str(fresh.value)
    assert "worker adder, iteration 3: call 1 of 1 (refusing_model)" in str(fresh.value)
    x[3000] = 1  # and the simulator still replays right after
    np.testing.assert_array_equal(simulator.run({"x": x})["y"], 3 * x)


def test_captures_past_the_bound_flush_and_still_replay_right(npu1, monkeypatch):
    """A flush comes once the captured rows reach `CAPTURE_BYTES` (a
    replay's memory is bounded): with room for 3 lines, 16 lines take 6."""
    monkeypatch.setattr(replay_module, "CAPTURE_BYTES", 3 * 256 * 4)
    design = one_worker(npu1, affine_body(256, 9), tile=256)
    simulator = Simulator(design)
    for seed in range(3):
        x = inputs(4096, seed)
        np.testing.assert_array_equal(simulator.run({"x": x})["y"], x * np.int32(3) + 9)
    assert kinds(simulator)[FLUSH] == 6


def test_whole_results_go_straight_to_the_tensor_and_a_false_claim_is_caught(npu1):
    """A call writing its object whole, which a drain then takes whole: the
    replay puts the results where the drain writes, one put per run of
    rows, and the answer is the fresh run's."""
    design = one_worker(npu1, affine_body(256, 9), tile=256)
    simulator = Simulator(design)
    for seed in range(3):
        x = inputs(4096, seed)
        replayed, fresh = simulator.run({"x": x}), simulate(design, {"x": x})
        np.testing.assert_array_equal(replayed["y"], fresh["y"])
        np.testing.assert_array_equal(replayed["y"], x * np.int32(3) + 9)
    counts = kinds(simulator)
    assert WRITE not in counts and counts[WRITE_TO] == 1  # 16 lines, one put
    calls = [(inputs(64, i), np.zeros(64, np.int32), 64, 1) for i in range(3)]
    with pytest.raises(AssertionError, match="its result, said whole, differs"):
        check_batch(partly_model, calls)


def partly_model(x, y, n, shift):
    affine_model(x, y, n - 1, shift)
    y[n - 1 :] = 0


def _write_partly(row, x, y, n, shift):
    y[: n - 1] = row[: n - 1]
    y[n - 1 :] = 0


batched(
    partly_model,
    reads=(0,),
    writes=(1,),
    compute=_affine_rows,
    write=_write_partly,
    whole=_whole_line,  # wrong: the last element is 0, not the result's
)
