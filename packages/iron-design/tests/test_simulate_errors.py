"""The simulator's reports: each names the design, the actor and the numbers."""

import re

import attrs
import numpy as np
import pytest
from sim_designs import (
    add_one_body,
    failing_model,
    kernel,
    one_worker,
    running_sum_model,
    with_fifo,
)

from iron.core.spec import INOUT, OUT
from iron.design import examples
from iron.design.model import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    Kernel,
    LocalBuffer,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Release,
    Tensor,
    Worker,
    core,
    memtile,
    shim,
    shipped,
)
from iron.design.simulate import (
    CoverageError,
    DeadlockError,
    KernelError,
    OutOfBoundsError,
    TransferError,
    WorkerError,
    simulate,
)

X = np.arange(4096, dtype=np.int32)


def _with_extra_fifo(device, body):
    """add_one's worker given a second input fifo, `extra`, that nothing fills."""
    return one_worker(
        device,
        body,
        fifos=(
            ObjectFifo("in", 1024, "i32", shim(), (core("adder"),)),
            ObjectFifo("extra", 1024, "i32", shim(), (core("adder"),)),
            ObjectFifo("out", 1024, "i32", core("adder"), (shim(),)),
        ),
    )


# ---- deadlocks ----------------------------------------------------------------------------


def test_a_worker_acquiring_from_a_fifo_nothing_fills_deadlocks(npu1):
    body = (Acquire("in"), Acquire("extra"), *add_one_body(1024)[1:], Release("extra"))
    with pytest.raises(DeadlockError) as error:
        simulate(_with_extra_fifo(npu1, body), {"x": X})
    message = str(error.value)
    assert message.startswith("design one_worker cannot finish:\n")
    assert (
        "  worker adder at (0, 2), iteration 1: waits on the consumer lock of fifo extra at "
        "core adder (0, 2) for 1 (it has 0; depth 2); holds 1 of in\n" in message
    )
    assert (
        "  runtime sequence: waits at the end of the sequence (group default) for "
        "sequence[1] drain of fifo out into y (0 of 4096 elements moved)\n" in message
    )
    adder = next(b for b in error.value.blocked if b.actor.startswith("worker adder"))
    assert (adder.fifo, adder.lock, adder.needs, adder.has, adder.idle) == (
        "extra", "consumer", 1, 0, False,
    )  # fmt: skip


def test_a_worker_idle_at_the_top_of_its_body_is_named_with_the_causes(npu1):
    body = (Acquire("extra"), *add_one_body(1024), Release("extra"))
    with pytest.raises(DeadlockError) as error:
        simulate(_with_extra_fifo(npu1, body), {"x": X})
    assert (
        "worker adder at (0, 2), iteration 1: waits on the consumer lock of fifo extra at "
        "core adder (0, 2) for 1 (it has 0; depth 2); holds nothing; idle at the top of its body"
        in str(error.value)
    )
    assert (
        "sequence[0] fill of fifo in from x (shim (0, 0) MM2S of fifo in): sent 2048 of 4096"
        in str(error.value)
    )


def test_a_forever_worker_idle_at_the_top_is_not_an_error(npu1):
    """A second worker whose input is never filled idles; the run finishes."""
    design = _with_extra_fifo(npu1, add_one_body(1024))
    spare = Worker("spare", (Acquire("extra"), Release("extra")))
    fifos = tuple(
        attrs.evolve(f, consumers=(core("spare"),)) if f.name == "extra" else f
        for f in design.fifos
    )  # fifo and worker change together: the design checks names as it is built
    design = attrs.evolve(design, fifos=fifos, workers=(*design.workers, spare))
    np.testing.assert_array_equal(simulate(design, {"x": X})["y"], X + 1)


def test_a_forever_worker_left_mid_iteration_waits_for_the_next_call(npu1):
    """Two objects per iteration, three sent and drained: the sequence ends
    with the worker inside its second iteration, waiting for the next call's
    data, which is no deadlock: only the sequence or a worker that runs once
    can wait forever."""
    design = one_worker(npu1, (Loop(2, add_one_body(1024)),), n=3072)
    np.testing.assert_array_equal(simulate(design, {"x": X[:3072]})["y"], X[:3072] + 1)
    once = one_worker(npu1, (Loop(2, add_one_body(1024)),), n=3072, forever=False)
    with pytest.raises(DeadlockError) as error:
        simulate(once, {"x": X[:3072]})
    assert str(error.value).startswith(
        "design one_worker cannot finish:\n"
        "  runtime sequence: waits at the end of the sequence (group default) for sequence[1] "
        "drain of fifo out into y (2048 of 3072 elements moved)\n"
    )


def fill_model(y: np.ndarray) -> None:
    y[:] = 7


def test_a_forever_producer_drained_a_bounded_number_of_times_is_no_deadlock(npu1):
    """The worker makes objects for as long as it runs; the sequence drains
    two and ends, the worker blocked on a full pool. That is its next call."""
    line = Memref((1024,), "i32")
    produce = Kernel("seven", (line,), shipped("tests", "seven.cc"), fill_model)
    body = (Acquire("out"), Call(produce, (Obj("out"),)), Release("out"))
    design = Design(
        "producer",
        npu1,
        (Tensor("y", 2048, "i32", OUT),),
        (ObjectFifo("out", 1024, "i32", core("w"), (shim(),)),),
        (Worker("w", body),),
        (Drain("out", "y"),),
    )
    np.testing.assert_array_equal(simulate(design, {})["y"], np.full(2048, 7, np.int32))


def test_a_worker_that_runs_once_must_finish(npu1):
    design = one_worker(npu1, (Loop(5, add_one_body(1024)),), forever=False)
    with pytest.raises(DeadlockError, match=r"worker adder at \(0, 2\), iteration 1: waits on"):
        simulate(design, {"x": X})


def test_a_fill_whose_objects_nobody_takes_never_completes(npu1):
    design = examples.passthrough(npu1)
    with pytest.raises(DeadlockError) as error:
        simulate(attrs.evolve(design, sequence=design.sequence[:1]), {"x": X})
    message = str(error.value)
    assert (
        "sequence[0] fill of fifo in from x (shim (0, 0) MM2S of fifo in): sent 2048 of 4096 "
        "elements of its BD; memtile fwd (0, 1) S2MM of fifo in takes none" in message
    )
    assert (
        "memtile fwd (0, 1) MM2S of fifo out: sent 0 of 1024 elements of its BD; "
        "shim (0, 0) S2MM of fifo out takes none" in message
    )


def test_a_worker_with_nothing_to_wait_on_parks(npu1):
    """A forever body that takes no lock would repeat itself unchanged:
    the worker parks instead of spinning the simulator forever."""
    busy = Worker(
        "busy",
        (Call(kernel(running_sum_model, 8, scalar=False), (Buf("a"), Buf("b"), Buf("c"))),),
        buffers=tuple(LocalBuffer(name, 8, "i32") for name in "abc"),
    )
    design = examples.add_one(npu1)
    design = attrs.evolve(design, workers=(*design.workers, busy))
    np.testing.assert_array_equal(simulate(design, {"x": X})["y"], X + 1)


# ---- access patterns --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement, message",
    [
        (
            Fill("in", "x", TAP(1, (4096,), (1,))),
            "design add_one: sequence[0] fill of fifo in from x: TAP [1][4096][1] reaches element "
            "4096 at step 4095 of 4096; tensor x has elements 0..4095",
        ),
        (
            Fill("in", "x", TAP(2047, (2, 2048), (-2048, 1))),
            "TAP [2047][2, 2048][-2048, 1] reaches element -1 at step 2048 of 4096",
        ),
    ],
)
def test_a_fill_reading_outside_its_tensor(npu1, statement, message):
    design = examples.add_one(npu1)
    with pytest.raises(OutOfBoundsError, match=re.escape(message)):
        simulate(attrs.evolve(design, sequence=(statement, design.sequence[1])), {"x": X})


def test_a_drain_writing_outside_its_tensor(npu1):
    design = examples.add_one(npu1)
    bad = Drain("out", "y", TAP(0, (4, 1024), (1025, 1)))  # 3 * 1025 + 1021 = 4096
    with pytest.raises(
        OutOfBoundsError,
        match=re.escape(
            "sequence[1] drain of fifo out into y: TAP [0][4, 1024][1025, 1] reaches element 4096 "
            "at step 4093 of 4096; tensor y has elements 0..4095"
        ),
    ):
        simulate(attrs.evolve(design, sequence=(design.sequence[0], bad)), {"x": X})


def test_dimensions_reading_outside_the_object(npu1):
    design = with_fifo(examples.passthrough(npu1), "out", dims_to_stream=((1024, 2),))
    with pytest.raises(
        OutOfBoundsError,
        match=re.escape(
            "design passthrough: memtile fwd (0, 1) MM2S of fifo out: dimensions [(1024, 2)] "
            "reaches element 1024 at step 512 of 1024; the object has elements 0..1023"
        ),
    ):
        simulate(design, {"x": X})


# ---- coverage ------------------------------------------------------------------------------------


def test_an_output_written_twice_and_never(npu1):
    design = examples.add_one(npu1)
    twice = Drain("out", "y", TAP(0, (2, 2048), (0, 1)))  # the first half, twice
    with pytest.raises(CoverageError) as error:
        simulate(attrs.evolve(design, sequence=(design.sequence[0], twice)), {"x": X})
    assert str(error.value) == (
        "design add_one: out tensor y of 4096 elements is written exactly once everywhere; found "
        "2048 elements never written (first y[2048]) and 2048 written more than once "
        "(first y[0], 2 times)"
    )


def test_an_output_element_written_twice_is_named_by_its_position(npu1):
    design = examples.transpose(npu1, 64, 32)
    # flat elements 32..1023 twice, 1056.. never; y is 32 x 64
    overlap = Drain("out", "y", TAP(0, (2, 1024), (32, 1)))
    with pytest.raises(
        CoverageError,
        match=re.escape(
            "(first y[16, 32]) and 992 written more than once (first y[0, 32], 2 times)"
        ),
    ):
        simulate(
            attrs.evolve(design, sequence=(design.sequence[0], overlap)),
            {"x": X[:2048].reshape(64, 32)},
        )


def test_an_inout_tensor_may_keep_elements_but_not_be_written_twice(npu1):
    design = examples.add_one(npu1, 2048, 1024)
    design = attrs.evolve(design, tensors=(design.tensors[0], Tensor("y", 4096, "i32", INOUT)))
    once = attrs.evolve(design, sequence=(Fill("in", "x"), Drain("out", "y", TAP.linear(2048))))
    assert simulate(once, {"x": X[:2048], "y": X}) is not None
    twice = attrs.evolve(
        design, sequence=(Fill("in", "x"), Drain("out", "y", TAP(0, (2, 1024), (0, 1))))
    )
    with pytest.raises(CoverageError) as error:
        simulate(twice, {"x": X[:2048], "y": X})
    assert str(error.value) == (
        "design add_one: inout tensor y of 4096 elements is written at most once per element; "
        "found 1024 written more than once (first y[0], 2 times)"
    )


# ---- transfers ------------------------------------------------------------------------------------


def test_a_transfer_of_part_of_an_object(npu1):
    design = examples.add_one(npu1)
    short = Fill("in", "x", TAP.linear(4000))
    with pytest.raises(
        TransferError,
        match=re.escape(
            "design add_one: sequence[0] fill of fifo in from x: TAP [0][4000][1] moves 4000 "
            "elements, not a whole number of 1024-element objects (3 and 928 left over)"
        ),
    ):
        simulate(attrs.evolve(design, sequence=(short, design.sequence[1])), {"x": X})


def test_dimensions_that_do_not_cover_the_object(npu1):
    design = examples.passthrough(npu1)
    consumers = (memtile("fwd", dims_from_stream=((512, 1),)),)
    with pytest.raises(
        TransferError,
        match=re.escape(
            "memtile fwd (0, 1) S2MM of fifo in: dimensions [(512, 1)] move 512 elements, "
            "but each BD moves 1024"
        ),
    ):
        simulate(with_fifo(design, "in", consumers=consumers), {"x": X})


def test_dimensions_at_a_runtime_end(npu1):
    design = with_fifo(examples.passthrough(npu1), "in", dims_to_stream=((1024, 1),))
    with pytest.raises(TransferError, match="fifo in has dimensions at its runtime end"):
        simulate(design, {"x": X})


# ---- kernels and bodies ----------------------------------------------------------------------------


def test_a_kernel_model_that_raises(npu1):
    body = (
        Acquire("in"),
        Acquire("out"),
        Call(kernel(failing_model, 1024), (Obj("in"), Obj("out"), 1024)),
        Release("in"),
        Release("out"),
    )
    with pytest.raises(KernelError) as error:
        simulate(one_worker(npu1, body), {"x": X})
    assert str(error.value).startswith(
        "design one_worker: worker adder, iteration 1: call 1 of 1 (failing_model): the model "
    )
    assert str(error.value).endswith("raised FloatingPointError: the kernel divided by zero")
    assert isinstance(error.value.__cause__, FloatingPointError)


def test_a_model_whose_signature_does_not_fit_the_kernel(npu1):
    unfit = attrs.evolve(
        kernel(running_sum_model, 1024, scalar=False), model=examples.add_one_model
    )
    body = (Acquire("in"), Acquire("out"), Call(unfit, (Obj("in"), Obj("out"), Obj("in"))))
    with pytest.raises(KernelError, match="raised TypeError"):
        simulate(one_worker(npu1, body), {"x": X})


@pytest.mark.parametrize(
    "body, message",
    [
        (
            (Acquire("in"), Release("in", 2)),
            "design one_worker: worker adder, iteration 1: releases 2 objects of fifo in but holds 1",
        ),
        (
            (
                Acquire("in"),
                Acquire("out"),
                Call(examples.add_one_kernel(1024), (Obj("in", 1), Obj("out"), 4)),
            ),
            "call 1 of 1 (add_one_i32): argument 0 is object 1 of fifo in, but the worker holds 1",
        ),
    ],
)
def test_a_body_using_objects_it_does_not_hold(npu1, body, message):
    with pytest.raises(WorkerError, match=re.escape(message)):
        simulate(one_worker(npu1, body), {"x": X})


# ---- arguments --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tensors, params, message",
    [
        ({}, None, "design add_one: in tensor x is missing from the tensors given"),
        ({"x": X, "z": X}, None, "design add_one has no tensor 'z' (tensors: x, y)"),
        ({"x": X[:100]}, None, "tensor x is (4096,) i32, got an array of (100,) int32"),
        ({"x": X.astype(np.int16)}, None, "tensor x is (4096,) i32, got an array of (4096,) int16"),
        ({"x": X}, {"n": 1}, "design add_one has no parameter 'n' (params: none)"),
    ],
)
def test_tensors_and_parameters_must_fit_the_design(npu1, tensors, params, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        simulate(examples.add_one(npu1), tensors, params)


@pytest.mark.parametrize(
    "params, message",
    [
        (None, "parameter 'n' is not given"),
        ({"n": 1.5}, "parameter n is 1.5, not an int"),
        ({"n": 2**31}, "parameter n = 2147483648 does not fit an int32 word"),
    ],
)
def test_parameters_are_int32_words(npu1, params, message):
    design = attrs.evolve(examples.add_one(npu1), params=("n",))
    with pytest.raises(ValueError, match=re.escape(message)):
        simulate(design, {"x": X}, params)


def test_output_tensors_are_optional_but_checked_when_given(npu1):
    design = examples.add_one(npu1)
    np.testing.assert_array_equal(simulate(design, {"x": X})["y"], X + 1)
    with pytest.raises(ValueError, match="tensor y is"):
        simulate(design, {"x": X, "y": np.zeros(3, np.int32)})
    assert OUT is design.tensor("y").direction
