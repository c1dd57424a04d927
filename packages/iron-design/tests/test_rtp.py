"""Runtime parameters on an xclbin (`lower(design, rtp=...)`): each core
that reads a named parameter gets a runtime-parameter buffer, the sequence
writes the call's words into it and releases the core through a barrier
lock, and the core reads its words there. The simulator runs that form, the
checker counts its memory and the emitter prints it (FileCheck patterns
written from mlir-aie's own: test/Conversion/DmaToNpu/rtp_write.mlir,
test/python/barrier.py, programming_examples/vision/color_threshold)."""

import attrs
import numpy as np
import pytest
from sim_designs import add_one_body, kernel, one_worker, scale_model
from test_mlir import V, assert_matches

from iron.core.spec import IN, OUT
from iron.design import DeadlockError, Simulator, check, lower, place
from iron.design.lower import SetLocks, WriteRtp
from iron.design.mlir import device_block
from iron.design.model import (
    Acquire,
    Call,
    DesignError,
    Drain,
    Fill,
    Loop,
    Obj,
    ObjectFifo,
    Param,
    Release,
    Tensor,
    Worker,
    core,
    shim,
)
from iron.design.testing import filecheck


def scaled(device, n=4096, tile=1024):
    body = (
        Loop(
            Param("tiles"),
            (
                Acquire("in"),
                Acquire("out"),
                Call(kernel(scale_model, tile), (Obj("in"), Obj("out"), Param("factor"))),
                Release("in"),
                Release("out"),
            ),
        ),
    )
    return one_worker(device, body, n=n, tile=tile, params=("tiles", "factor"))


def ints(n):
    return np.arange(n, dtype=np.int32) - n // 2


def test_each_reading_core_gets_a_buffer_written_first_and_a_barrier(npu1):
    lowered = lower(scaled(npu1), rtp=("tiles", "factor"))
    config = lowered.configuration
    (buffer,) = config.rtps
    assert (buffer.worker, buffer.symbol, buffer.params) == (
        "adder",
        "rtp_adder",
        ("tiles", "factor"),
    )
    assert config.locks[buffer.lock].tile == buffer.tile == config.core("adder").tile
    assert config.core("adder").rtp == 0
    ops = lowered.runtime.ops
    assert ops[:3] == (
        WriteRtp(0, 0, "tiles", 0),
        WriteRtp(0, 1, "factor", 0),
        SetLocks((buffer.lock,), 1, 0),
    )
    assert lower(scaled(npu1)).configuration.rtps == ()  # the full-ELF form is unchanged
    with pytest.raises(DesignError, match="runtime-parameter word 'count' is not one of"):
        lower(scaled(npu1), rtp=("count",))


def test_only_a_core_that_reads_a_word_gets_a_buffer(npu1):
    scaler = scaled(npu1)
    n = 4096
    design = attrs.evolve(
        scaler,
        tensors=(*scaler.tensors, Tensor("x2", n, "i32", IN), Tensor("y2", n, "i32", OUT)),
        fifos=(
            *scaler.fifos,
            ObjectFifo("in2", 1024, "i32", shim(), (core("plain"),)),
            ObjectFifo("out2", 1024, "i32", core("plain"), (shim(),)),
        ),
        workers=(*scaler.workers, Worker("plain", add_one_body(1024, "in2", "out2"))),
        sequence=(*scaler.sequence, Fill("in2", "x2"), Drain("out2", "y2")),
    )
    lowered = lower(design, rtp=("tiles", "factor"))
    config = lowered.configuration
    assert [b.worker for b in config.rtps] == ["adder"]
    assert config.core("plain").rtp is None
    assert [i.name for i in config.memory_of(config.core("plain").tile) if i.kind == "buffer"] == []
    x = ints(n)
    run = Simulator(design, lowered=lowered).run({"x": x, "x2": x}, {"tiles": 4, "factor": 7})
    np.testing.assert_array_equal(run["y"], x * 7)
    np.testing.assert_array_equal(run["y2"], x + 1)


def test_the_lowered_text_shows_the_words_and_the_wait(npu1):
    from iron.design.cli import lowered_text

    text = lowered_text(lower(scaled(npu1), rtp=("tiles", "factor")))
    assert "rtp write  factor into word 1 of rtp_adder" in text
    assert "set lock   the barrier lock of rtp_adder to 1" in text
    assert "each iteration: wait for rtp_adder; loop " in text
    assert "  wait for rtp_adder; " in lowered_text(lower(scaled(npu1), rtp=("factor",)))


def test_the_simulator_runs_the_rtp_form(npu1):
    design, x = scaled(npu1), ints(4096)
    simulator = Simulator(design, lowered=lower(design, rtp=("tiles", "factor")))
    for factor in (-3, 5, -3):  # a replay takes the call's words too
        y = simulator.run({"x": x}, {"tiles": 4, "factor": factor})["y"]
        np.testing.assert_array_equal(y, x * factor)
    # only the factor as an RTP word: the loop count stays the run's parameter
    partial = Simulator(design, lowered=lower(design, rtp=("factor",)))
    np.testing.assert_array_equal(partial.run({"x": x}, {"tiles": 4, "factor": 2})["y"], x * 2)


def _without(lowered, drop):
    runtime = attrs.evolve(
        lowered.runtime, ops=tuple(op for op in lowered.runtime.ops if not drop(op))
    )
    return attrs.evolve(lowered, runtime=runtime)


def _replaced(lowered, old, new):
    ops = tuple(new if op == old else op for op in lowered.runtime.ops)
    return attrs.evolve(lowered, runtime=attrs.evolve(lowered.runtime, ops=ops))


def test_a_wrong_word_or_a_missing_barrier_set_shows(npu1):
    design, x = scaled(npu1), ints(4096)
    lowered = lower(design, rtp=("tiles", "factor"))
    params = {"tiles": 4, "factor": 3}

    # no barrier set: the core never reads its words, the drain waits forever
    unset = _without(lowered, lambda op: isinstance(op, SetLocks))
    with pytest.raises(DeadlockError, match="waits for barrier rtp_adder to be 1"):
        Simulator(design, lowered=unset).run({"x": x}, params)

    # the factor written into the loop count's word: 3 tiles, and the fourth
    # waits for the next call's words (the core reads them at each call)
    swapped = _replaced(lowered, WriteRtp(0, 1, "factor", 0), WriteRtp(0, 0, "factor", 0))
    with pytest.raises(
        DeadlockError, match=r"iteration 2: waits for barrier rtp_adder to be 1 \(it is 2\)"
    ):
        Simulator(design, lowered=swapped).run({"x": x}, params)

    # the count written into the factor's word: the output is scaled by 4, not 3
    # (and a replay, which takes the words as the first run read them, agrees)
    crossed = _replaced(lowered, WriteRtp(0, 1, "factor", 0), WriteRtp(0, 1, "tiles", 0))
    simulator = Simulator(design, lowered=crossed)
    for _ in range(2):
        np.testing.assert_array_equal(simulator.run({"x": x}, params)["y"], x * 4)


def test_a_core_that_reads_a_word_before_its_first_acquire_waits_at_every_iteration(npu1):
    """The loop count at the top of the body is read before any data of a
    call arrives: that core waits for each call's words and releases after
    its iteration (an iteration is a call). A word read only after an
    acquire (the kernel's factor, the count fixed) is ordered by the data:
    one wait, before the loop."""
    design, x = scaled(npu1), ints(4096)
    (each,) = lower(design, rtp=("tiles", "factor")).configuration.rtps
    (once,) = lower(design, rtp=("factor",)).configuration.rtps
    assert each.each_iteration and not once.each_iteration
    y = Simulator(design, lowered=lower(design, rtp=("factor",))).run(
        {"x": x}, {"tiles": 4, "factor": 3}
    )["y"]
    np.testing.assert_array_equal(y, x * 3)
    # two iterations of two tiles: the second waits for a call that never comes
    with pytest.raises(DeadlockError, match="iteration 2: waits for barrier rtp_adder"):
        Simulator(design, lowered=lower(design, rtp=("tiles", "factor"))).run(
            {"x": x}, {"tiles": 2, "factor": 3}
        )
    # the same words from the scratchpad (a full ELF, cores restarted per run) run them both
    y = Simulator(design).run({"x": x}, {"tiles": 2, "factor": 3})["y"]
    np.testing.assert_array_equal(y, x * 3)


def test_the_buffers_count_in_core_memory(npu1):
    design = scaled(npu1, n=1024, tile=1024)
    memory = npu1.limits("core").memory_bytes
    config = lower(design).configuration
    fifos = sum(i.total for i in config.memory_of(config.core("adder").tile) if i.kind == "fifo")
    # a stack that fills the core's memory beside the fifos, to the byte
    worker = attrs.evolve(design.workers[0], stack_size=memory - fifos)
    tight = attrs.evolve(design, workers=(worker,))
    assert check(tight).ok
    report = check(tight, rtp=("tiles", "factor"))
    assert not report.ok
    assert "core memory" in str(report) and "buffer rtp_adder 8 B" in str(report)


RTP_CHECKS = f"""
CHECK:      aie.device(npu1) @op {{
CHECK:      %[[TILE:{V}]] = aie.tile(0, 2)
CHECK:      %[[BUF:{V}]] = aie.buffer(%[[TILE]]) {{sym_name = "rtp_adder"}} : memref<2xi32>
CHECK-NEXT: %[[LOCK:{V}]] = aie.lock(%[[TILE]]) {{init = 0 : i32}}
CHECK:      aie.core(%[[TILE]])
CHECK-DAG:  %[[C0:{V}]] = arith.constant 0 : index
CHECK-DAG:  %[[C1:{V}]] = arith.constant 1 : index
CHECK-DAG:  %[[ONE:{V}]] = arith.constant 1 : i32
CHECK-NOT:  aie.use_lock(%[[LOCK]]
CHECK:      scf.for
CHECK-NEXT: aie.use_lock(%[[LOCK]], Acquire, %[[ONE]])
CHECK-NEXT: %[[TILES:{V}]] = memref.load %[[BUF]][%[[C0]]] : memref<2xi32>
CHECK-NEXT: %[[BOUND:{V}]] = arith.index_cast %[[TILES]] : i32 to index
CHECK-NEXT: scf.for %{{{{{V}}}}} = %{{{{{V}}}}} to %[[BOUND]] step
CHECK:      %[[FACTOR:{V}]] = memref.load %[[BUF]][%[[C1]]] : memref<2xi32>
CHECK-NEXT: func.call @scale_model(%{{{{{V}}}}}, %{{{{{V}}}}}, %[[FACTOR]])
CHECK:      }}
CHECK-NEXT: aie.use_lock(%[[LOCK]], Release, %[[ONE]])
CHECK-NEXT: }}
CHECK-NOT:  read_scratchpad_parameter
CHECK:      aie.runtime_sequence @sequence(
CHECK-NEXT: %[[V0:{V}]] = arith.constant 4 : i32
CHECK-NEXT: aiex.npu.rtp_write(@rtp_adder, 0, %[[V0]]) : i32
CHECK-NEXT: %[[V1:{V}]] = arith.constant -3 : i32
CHECK-NEXT: aiex.npu.rtp_write(@rtp_adder, 1, %[[V1]]) : i32
CHECK-NEXT: aiex.set_lock(%[[LOCK]], 1)
CHECK-NEXT: aiex.dma_configure_task_for @in
"""


def test_the_emitted_block_declares_reads_and_writes_the_words(npu1, tmp_path):
    design = place(scaled(npu1))
    block = device_block(
        design, symbol="op", params={"tiles": 4, "factor": -3}, rtp=("tiles", "factor"),
        load_pdi=False,
    )  # fmt: skip
    assert_matches(block.text, RTP_CHECKS, tmp_path)
    assert block.parameters == ()  # no scratchpad symbol is read
    # the full-ELF block of the same design reads the scratchpad, with no buffer
    plain = device_block(design, symbol="op", load_pdi=False).text
    assert filecheck(plain, RTP_CHECKS, tmp_path)[0] != 0
    assert "read_scratchpad_parameter @factor" in plain and "rtp" not in plain


def test_an_rtp_word_is_written_as_a_constant_never_a_scratchpad_symbol(npu1):
    with pytest.raises(DesignError, match="parameter tiles is a runtime-parameter word"):
        device_block(place(scaled(npu1)), rtp=("tiles",))
