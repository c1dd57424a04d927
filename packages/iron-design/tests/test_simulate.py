"""The simulator on programs whose answers numpy gives without it."""

import re

import attrs
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_designs import (
    accumulate_model,
    add_one_body,
    kernel,
    one_worker,
    running_sum_worker,
    scale_model,
    with_fifo,
)

from iron.core import Device
from iron.core.spec import IN, INOUT, OUT
from iron.design import examples
from iron.design.check import check
from iron.design.lower import lower
from iron.design.model import (
    TAP,
    Acquire,
    Call,
    Design,
    Drain,
    Fill,
    Finish,
    Kernel,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    Release,
    SetBarrier,
    Tensor,
    Tile,
    WaitBarrier,
    Worker,
    core,
    forward,
    memtile,
    shim,
    shipped,
    split,
)
from iron.design.simulate import BytesMoved, DeadlockError, simulate

rng = np.random.default_rng(13)


def ints(*shape) -> np.ndarray:
    return rng.integers(-(2**20), 2**20, size=shape, dtype=np.int32)


# ---- the known-answer programs ------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, make",
    [
        ("i32", ints),
        ("i8", lambda n: rng.integers(-128, 128, n, dtype=np.int8)),
        ("i16", lambda n: rng.integers(-(2**15), 2**15, n, dtype=np.int16)),
        ("u8", lambda n: rng.integers(0, 256, n, dtype=np.uint8)),
        ("u16", lambda n: rng.integers(0, 2**16, n, dtype=np.uint16)),
        ("u32", lambda n: rng.integers(0, 2**32, n, dtype=np.uint32)),
        ("f32", lambda n: rng.standard_normal(n).astype(np.float32)),
        ("bf16", lambda n: rng.standard_normal(n).astype(ml_dtypes.bfloat16)),
    ],
)
def test_passthrough_output_is_the_input(npu1, dtype, make):
    x = make(4096)
    result = simulate(examples.passthrough(npu1, dtype=dtype), {"x": x})
    assert result["y"].dtype == x.dtype
    np.testing.assert_array_equal(result["y"], x)


@pytest.mark.parametrize("n, tile", [(4096, 1024), (2048, 256), (512, 512)])
def test_add_one_adds_one(npu1, n, tile):
    x = ints(n)
    np.testing.assert_array_equal(simulate(examples.add_one(npu1, n, tile), {"x": x})["y"], x + 1)


@pytest.mark.parametrize("times", [1, 3, 4])
def test_repeat_sends_the_object_repeat_count_times(npu1, times):
    x = ints(1024)
    result = simulate(examples.repeat(npu1, 1024, times), {"x": x})
    np.testing.assert_array_equal(result["y"], np.tile(x, times))


@pytest.mark.parametrize("rows, cols", [(64, 32), (8, 16)])
def test_transpose_by_access_pattern_alone(npu1, rows, cols):
    x = ints(rows, cols)
    np.testing.assert_array_equal(
        simulate(examples.transpose(npu1, rows, cols), {"x": x})["y"], x.T
    )


@pytest.mark.parametrize("workers", [4, 2])
def test_split_across_cores_and_join_back(npu1, workers):
    x = ints(4096)
    result = simulate(examples.split_join(npu1, 4096, 256, workers), {"x": x})
    np.testing.assert_array_equal(result["y"], x + 1)
    core_tiles = [w.tile for w in result.design.workers]
    lane_bytes = 4096 // workers * 4
    assert [result.traffic.tiles[t] for t in core_tiles] == [
        BytesMoved(lane_bytes, lane_bytes)
    ] * workers


def _split_to_two_cores(device, offsets, n=4096):
    """x is split at the memtile into lanes of 256-element objects at
    `offsets` of each 1024-element object; a core adds one to each lane and
    the runtime drains lane i into y<i>."""
    lanes = range(2)
    fifos = [ObjectFifo("in", 1024, "i32", shim(), (memtile("scatter"),))]
    workers = []
    for i in lanes:
        fifos += [
            ObjectFifo(f"in{i}", 256, "i32", memtile("scatter"), (core(f"w{i}"),)),
            ObjectFifo(f"out{i}", 256, "i32", core(f"w{i}"), (shim(),)),
        ]
        workers.append(Worker(f"w{i}", add_one_body(256, f"in{i}", f"out{i}")))
    stream = (1024 - offsets[0]) * n // 1024  # elements before the first offset are never sent
    spans = [offsets[1] - offsets[0], 1024 - offsets[1]]
    per_lane = [stream * span // (1024 - offsets[0]) for span in spans]
    return Design(
        "gapped",
        device,
        (
            Tensor("x", stream, "i32", IN),
            *(Tensor(f"y{i}", per_lane[i], "i32", OUT) for i in lanes),
        ),
        tuple(fifos),
        tuple(workers),
        (Fill("in", "x"), *(Drain(f"out{i}", f"y{i}") for i in lanes)),
        links=(split("scatter", "in", ["in0", "in1"], offsets),),
    )


@pytest.mark.parametrize(
    "offsets, spans",
    [
        ([0, 256], [256, 768]),  # the gap after lane 0's object: lane 1 takes three objects
        ([0, 512], [512, 512]),  # lane 0 takes two
        ([256, 512], [256, 512]),  # nothing before 256 is moved: the stream fills 256..1023
    ],
)
def test_a_gapped_split_moves_each_lane_up_to_the_next_offset(npu1, offsets, spans):
    """mlir-aie's link lowering moves lane i from its offset to the next
    (`getDistributeTransferLengths`): the memtile writes the stream into each
    slot from the first offset on, and lane i sends its span on, a whole
    number of its objects. Known answer: numpy cuts the stream into spans."""
    design = _split_to_two_cores(npu1, offsets)
    assert check(design).ok
    x = ints(design.tensor("x").size)
    run = simulate(design, {"x": x})
    per_slot = x.reshape(-1, sum(spans))
    np.testing.assert_array_equal(run["y0"], per_slot[:, : spans[0]].reshape(-1) + 1)
    np.testing.assert_array_equal(run["y1"], per_slot[:, spans[0] :].reshape(-1) + 1)


def add_position_model(x: np.ndarray, y: np.ndarray) -> None:
    """Each element plus its place in the object: a result that tells
    objects that were put together in the wrong order."""
    y[:] = x + np.arange(len(x), dtype=np.int32)


def test_an_aggregating_forward_puts_source_objects_together(npu1):
    """A forward whose destination objects are four of its source's: the
    memtile pool holds destination objects (`createObjectFifoElements` keeps
    the larger side) and its S2MM BD takes four source objects into one."""
    n = 4096
    line = Memref((1024,), "i32")
    kernel = Kernel("add_position", (line, line), shipped("tests", "x.cc"), add_position_model)
    body = (Acquire("big"), Acquire("out"), Call(kernel, (Obj("big"), Obj("out"))),
            Release("big"), Release("out"))  # fmt: skip
    design = Design(
        "aggregate",
        npu1,
        (Tensor("x", n, "i32", IN), Tensor("y", n, "i32", OUT)),
        (
            ObjectFifo("small", 256, "i32", shim(), (memtile("gather"),)),
            ObjectFifo("big", 1024, "i32", memtile("gather"), (core("w"),)),
            ObjectFifo("out", 1024, "i32", core("w"), (shim(),)),
        ),
        (Worker("w", body),),
        (Fill("small", "x"), Drain("out", "y")),
        links=(forward("gather", "small", "big"),),
    )
    assert check(design).ok
    pool = next(p for p in lower(design).configuration.pools if p.kind == "memtile")
    assert (pool.name, pool.size) == ("big", 1024)
    x = ints(n)
    expected = x + np.tile(np.arange(1024, dtype=np.int32), n // 1024)
    np.testing.assert_array_equal(simulate(design, {"x": x})["y"], expected)


def test_a_corrupted_stride_moves_elements(npu1):
    """The transpose's column stride set to 0 reads column 0 every time."""
    rows, cols = 64, 32
    design = examples.transpose(npu1, rows, cols)
    broken = attrs.evolve(
        design, sequence=(Fill("in", "x", TAP(0, (cols, rows), (0, cols))), design.sequence[1])
    )
    x = ints(rows, cols)
    y = simulate(broken, {"x": x})["y"]
    np.testing.assert_array_equal(y, np.tile(x[:, 0], (cols, 1)))  # what the bad TAP reads
    moved = np.argwhere(y != x.T)
    assert len(moved), "a corrupted stride must change the output"
    # every row of y but the first (column 0 of x, read correctly) is wrong
    assert sorted({int(r) for r, _ in moved}) == list(range(1, cols)), (
        f"elements that moved: {moved[:8].tolist()}..."
    )


# ---- dimensions ---------------------------------------------------------------------------

COLUMNS_FIRST = ((64, 1), (16, 64))  # a 16 x 64 object read column by column


def _transposed(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Each `rows` x `cols` block of `x` transposed, flat."""
    return x.reshape(-1, rows, cols).transpose(0, 2, 1).reshape(-1)


def test_dims_to_stream_orders_the_producers_read(npu1):
    design = with_fifo(examples.passthrough(npu1, 4096, 1024), "out", dims_to_stream=COLUMNS_FIRST)
    x = ints(4096)
    np.testing.assert_array_equal(simulate(design, {"x": x})["y"], _transposed(x, 16, 64))


def test_dims_from_stream_places_the_consumers_elements(npu1):
    design = examples.passthrough(npu1, 4096, 1024)
    reordering = (attrs.evolve(design.fifo("in").consumers[0], dims_from_stream=COLUMNS_FIRST),)
    design = with_fifo(design, "in", consumers=reordering)
    x = ints(4096)
    # stream element i*16 + j lands at row j, column i of the 16 x 64 object
    np.testing.assert_array_equal(simulate(design, {"x": x})["y"], _transposed(x, 64, 16))
    undone = with_fifo(design, "out", dims_to_stream=COLUMNS_FIRST)
    np.testing.assert_array_equal(simulate(undone, {"x": x})["y"], x)


def test_dims_from_stream_on_a_core_reorders_before_the_kernel(npu1):
    design = examples.add_one(npu1, 4096, 1024)
    reordering = (attrs.evolve(design.fifo("in").consumers[0], dims_from_stream=COLUMNS_FIRST),)
    x = ints(4096)
    result = simulate(with_fifo(design, "in", consumers=reordering), {"x": x})
    np.testing.assert_array_equal(result["y"], _transposed(x, 64, 16) + 1)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5)),
    order=st.permutations([0, 1, 2, 3]),
    on_fill=st.booleans(),
)
def test_any_axis_order_through_passthrough(shape, order, on_fill):
    """A TAP walking a 4-D tensor in any axis order, on the fill or the
    drain: numpy's transpose gives the element order."""
    shape = (*shape, 4)  # objects of 4 elements tile every transfer
    n = int(np.prod(shape))
    strides = np.array([int(np.prod(shape[i + 1 :])) for i in range(4)])
    tap = TAP(0, [shape[i] for i in order], strides[list(order)])
    walk = np.arange(n).reshape(shape).transpose(order).reshape(-1)
    design = examples.passthrough(Device.from_name("npu1"), n, 4)  # no fixtures under @given
    fill, drain = (
        (Fill("in", "x", tap), Drain("out", "y"))
        if on_fill
        else (Fill("in", "x"), Drain("out", "y", tap))
    )
    x = ints(n)
    y = simulate(attrs.evolve(design, sequence=(fill, drain)), {"x": x})["y"]
    if on_fill:
        np.testing.assert_array_equal(y, x[walk])
    else:
        expected = np.empty_like(x)
        expected[walk] = x
        np.testing.assert_array_equal(y, expected)


# ---- workers: buffers, parameters, barriers, broadcasts -----------------------------------


def test_local_buffers_persist_across_iterations(npu1):
    design = one_worker(npu1, (), workers=(running_sum_worker(256),), n=2048, tile=256)
    x = ints(2048)
    expected = np.cumsum(x.reshape(-1, 256), axis=0, dtype=np.int32).reshape(-1)
    np.testing.assert_array_equal(simulate(design, {"x": x})["y"], expected)


def test_memory_a_design_never_wrote_is_garbage(npu1):
    """Core memory is not cleared on a device: a running sum whose buffer has
    no initial value starts from garbage (every byte 0x5A), and a kernel that
    adds into its output object instead of writing it adds to garbage, then
    to what the slot (one of two) held before."""
    x = ints(2048)
    garbage = np.int32(0x5A5A5A5A)
    design = one_worker(
        npu1, (), workers=(running_sum_worker(256, initial_value=None),), n=2048, tile=256
    )
    expected = np.cumsum(x.reshape(-1, 256), axis=0, dtype=np.int32).reshape(-1)
    np.testing.assert_array_equal(simulate(design, {"x": x})["y"], expected + garbage)

    body = (
        Acquire("in"),
        Acquire("out"),
        Call(kernel(accumulate_model, 256), (Obj("in"), Obj("out"), 256)),
        Release("in"),
        Release("out"),
    )
    y = simulate(one_worker(npu1, body, n=2048, tile=256), {"x": x})["y"].reshape(-1, 256)
    tiles = x.reshape(-1, 256)
    np.testing.assert_array_equal(y[:2], tiles[:2] + garbage)  # each slot's first use
    np.testing.assert_array_equal(y[2:], y[:-2] + tiles[2:])  # a slot keeps what it held


def test_a_parameter_is_a_loop_count_and_a_kernel_scalar(npu1):
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
    design = one_worker(npu1, body, forever=False, params=("tiles", "factor"))
    x = ints(4096)
    y = simulate(design, {"x": x}, {"tiles": 4, "factor": -3})["y"]
    np.testing.assert_array_equal(y, x * -3)
    with pytest.raises(
        DeadlockError,
        match="worker adder at \\(0, 2\\), iteration 1: waits on the consumer lock of fifo in",
    ):
        simulate(design, {"x": x}, {"tiles": 5, "factor": 1})  # waits for a fifth object
    with pytest.raises(
        DeadlockError,
        match="fifo in at core adder \\(0, 2\\): 1 object full in the pool, never taken",
    ):
        simulate(design, {"x": x}, {"tiles": 3, "factor": 1})  # leaves the fourth


def test_a_worker_waits_for_its_barrier(npu1):
    body = (WaitBarrier("go", 2), *add_one_body(1024))
    fill, drain = Fill("in", "x"), Drain("out", "y")
    design = one_worker(npu1, body, barriers=("go",))
    x = ints(4096)
    ready = attrs.evolve(design, sequence=(SetBarrier("go", 2), fill, drain))
    np.testing.assert_array_equal(simulate(ready, {"x": x})["y"], x + 1)
    late = (fill, drain, Finish(), SetBarrier("go", 2))
    for wrong in [late, (SetBarrier("go", 1), fill, drain), (SetBarrier("go", 3), fill, drain)]:
        with pytest.raises(DeadlockError, match="waits for barrier go to be 2") as error:
            simulate(attrs.evolve(design, sequence=wrong), {"x": x})
        assert "runtime sequence: waits at " in str(error.value)


def test_a_broadcast_feeds_every_consumer(npu1):
    design = one_worker(
        npu1,
        (),
        tensors=(
            Tensor("x", 4096, "i32"),
            Tensor("y", 4096, "i32", OUT),
            Tensor("z", 4096, "i32", OUT),
        ),
        fifos=(
            ObjectFifo("in", 1024, "i32", shim(), (core("a"), core("b"))),
            ObjectFifo("ya", 1024, "i32", core("a"), (shim(),)),
            ObjectFifo("zb", 1024, "i32", core("b"), (shim(),)),
        ),
        workers=(
            Worker("a", add_one_body(1024, "in", "ya")),
            Worker("b", add_one_body(1024, "in", "zb")),
        ),
        sequence=(Fill("in", "x"), Drain("ya", "y"), Drain("zb", "z")),
    )
    x = ints(4096)
    result = simulate(design, {"x": x})
    np.testing.assert_array_equal(result["y"], x + 1)
    np.testing.assert_array_equal(result["z"], x + 1)


def test_a_broadcast_to_the_runtime_and_a_core(npu1):
    """One drain BD of the whole tensor and the core's BDs of one object
    each take the same stream."""
    design = one_worker(
        npu1,
        add_one_body(1024),
        tensors=(
            Tensor("x", 4096, "i32"),
            Tensor("y", 4096, "i32", OUT),
            Tensor("z", 4096, "i32", OUT),
        ),
        fifos=(
            ObjectFifo("x", 1024, "i32", shim(), (memtile("fwd"),)),
            ObjectFifo("in", 1024, "i32", memtile("fwd"), (shim(), core("adder"))),
            ObjectFifo("out", 1024, "i32", core("adder"), (shim(),)),
        ),
        links=(forward("fwd", "x", "in"),),
        sequence=(Fill("x", "x"), Drain("in", "z"), Drain("out", "y")),
    )
    x = ints(4096)
    result = simulate(design, {"x": x})
    np.testing.assert_array_equal(result["z"], x)
    np.testing.assert_array_equal(result["y"], x + 1)


def test_a_broadcast_to_a_core_and_a_memtile_split(npu1):
    """The core's BDs take whole objects, the split's receiving BDs halves."""
    design = one_worker(
        npu1,
        add_one_body(1024),
        tensors=(
            Tensor("x", 4096, "i32"),
            Tensor("y", 4096, "i32", OUT),
            Tensor("lo", 2048, "i32", OUT),
            Tensor("hi", 2048, "i32", OUT),
        ),
        fifos=(
            ObjectFifo("in", 1024, "i32", shim(), (core("adder"), memtile("halves"))),
            ObjectFifo("lo", 512, "i32", memtile("halves"), (shim(),)),
            ObjectFifo("hi", 512, "i32", memtile("halves"), (shim(),)),
            ObjectFifo("out", 1024, "i32", core("adder"), (shim(),)),
        ),
        links=(split("halves", "in", ["lo", "hi"], [0, 512]),),
        sequence=(Fill("in", "x"), Drain("lo", "lo"), Drain("hi", "hi"), Drain("out", "y")),
    )
    x = ints(4096)
    result = simulate(design, {"x": x})
    np.testing.assert_array_equal(result["y"], x + 1)
    np.testing.assert_array_equal(result["lo"], x.reshape(-1, 2, 512)[:, 0].reshape(-1))
    np.testing.assert_array_equal(result["hi"], x.reshape(-1, 2, 512)[:, 1].reshape(-1))


def test_a_broadcast_waits_for_its_slowest_consumer(npu1):
    """Worker b waits on a fifo nothing fills, so its two slots of `in` fill
    up and the broadcast stops there: worker a gets two objects, not four."""
    design = one_worker(
        npu1,
        (),
        tensors=(
            Tensor("x", 4096, "i32"),
            Tensor("w", 1024, "i32"),
            Tensor("y", 4096, "i32", OUT),
            Tensor("z", 4096, "i32", OUT),
        ),
        fifos=(
            ObjectFifo("in", 1024, "i32", shim(), (core("a"), core("b"))),
            ObjectFifo("never", 1024, "i32", shim(), (core("b"),)),
            ObjectFifo("ya", 1024, "i32", core("a"), (shim(),)),
            ObjectFifo("zb", 1024, "i32", core("b"), (shim(),)),
        ),
        workers=(
            Worker("a", add_one_body(1024, "in", "ya")),
            Worker("b", (Acquire("never"), *add_one_body(1024, "in", "zb"), Release("never"))),
        ),
        sequence=(Fill("in", "x"), Drain("ya", "y"), Drain("zb", "z")),
    )
    with pytest.raises(DeadlockError) as error:
        simulate(design, {"x": ints(4096), "w": ints(1024)})
    message = str(error.value)
    assert "drain of fifo ya into y (2048 of 4096 elements moved)" in message
    b = next(b for b in error.value.blocked if b.actor.startswith("worker b"))
    assert (b.fifo, b.lock, b.needs, b.has, b.idle) == ("never", "consumer", 1, 0, True)
    assert (
        "core b (0, 3) S2MM of fifo in: waits on the producer lock of fifo in at core b (0, 3) for 1 (it has 0)"
        in message
    )


def _pipeline(npu1, second: Tile):
    """x -> first (+1) -> mid -> second (+1) -> y, the second worker pinned."""
    return one_worker(
        npu1,
        (),
        fifos=(
            ObjectFifo("in", 1024, "i32", shim(), (core("first"),)),
            ObjectFifo("mid", 1024, "i32", core("first"), (core("second"),)),
            ObjectFifo("out", 1024, "i32", core("second"), (shim(),)),
        ),
        workers=(
            Worker("first", add_one_body(1024, "in", "mid"), tile=Tile(0, 2)),
            Worker("second", add_one_body(1024, "mid", "out"), tile=second),
        ),
    )


def test_neighbour_cores_share_a_pool_and_distant_ones_use_dma(npu1):
    x = ints(4096)
    shared = simulate(_pipeline(npu1, Tile(0, 3)), {"x": x})
    apart = simulate(_pipeline(npu1, Tile(1, 3)), {"x": x})
    np.testing.assert_array_equal(shared["y"], x + 2)
    np.testing.assert_array_equal(apart["y"], x + 2)
    nbytes = 4096 * 4
    # shared: first's tile receives `in` and sends nothing; second's sends `out`
    assert shared.traffic.tiles[Tile(0, 2)] == BytesMoved(read=0, written=nbytes)
    assert shared.traffic.tiles[Tile(0, 3)] == BytesMoved(read=nbytes, written=0)
    assert apart.traffic.tiles[Tile(0, 2)] == BytesMoved(read=nbytes, written=nbytes)
    assert apart.traffic.tiles[Tile(1, 3)] == BytesMoved(read=nbytes, written=nbytes)


@pytest.mark.parametrize(
    "first, second, where",
    [
        (Tile(0, 2), Tile(0, 3), "core first (0, 2)"),  # vertical: the producer's memory
        (Tile(0, 2), Tile(1, 2), "core first (0, 2)"),  # the consumer sees its west neighbour's
        (Tile(1, 2), Tile(0, 2), "core second (0, 2)"),  # only the producer sees its west one's
    ],
)
def test_a_shared_pool_sits_where_both_cores_see_it(npu1, first, second, where):
    design = _pipeline(npu1, second)
    starving = Worker("second", (Acquire("mid", 3), Release("mid", 3)), tile=second)
    design = attrs.evolve(design, workers=(attrs.evolve(design.workers[0], tile=first), starving))
    with pytest.raises(
        DeadlockError, match=re.escape(f"the consumer lock of fifo mid at {where} for 3")
    ):
        simulate(design, {"x": ints(4096)})


# ---- depths, acquires, iteration counts -------------------------------------------------------


def _two_at_a_time(tile: int):
    return (
        Acquire("in", 2),
        Acquire("out", 2),
        Call(examples.add_one_kernel(tile), (Obj("in", 0), Obj("out", 0), tile)),
        Call(examples.add_one_kernel(tile), (Obj("in", 1), Obj("out", 1), tile)),
        Release("in", 2),
        Release("out", 2),
    )


def test_acquiring_two_objects_needs_depth_two(npu1):
    design = one_worker(npu1, _two_at_a_time(1024))
    x = ints(4096)
    np.testing.assert_array_equal(simulate(design, {"x": x})["y"], x + 1)
    shallow = with_fifo(design, "in", consumers=(core("adder", depth=1),))
    with pytest.raises(DeadlockError) as error:
        simulate(shallow, {"x": x})
    adder = next(b for b in error.value.blocked if b.actor.startswith("worker adder"))
    assert (adder.fifo, adder.lock, adder.needs, adder.has) == ("in", "consumer", 2, 1)
    assert "for 2 (it has 1; depth 1); holds nothing" in str(error.value)


def test_acquire_is_cumulative(npu1):
    """Acquire 2, use and release the oldest, acquire 2 again: a sliding
    window over the stream that only waits for one new object each time."""
    tile = 256
    body = (
        Acquire("in", 1),
        Loop(
            7,
            (
                Acquire("in", 2),
                Acquire("out"),
                Call(examples.add_one_kernel(tile), (Obj("in", 1), Obj("out"), tile)),
                Release("in", 1),
                Release("out"),
            ),
        ),
        Release("in", 1),
    )
    design = one_worker(
        npu1,
        body,
        n=8 * tile,
        tile=tile,
        forever=False,
        tensors=(Tensor("x", 8 * tile, "i32"), Tensor("y", 7 * tile, "i32", OUT)),
        sequence=(Fill("in", "x"), Drain("out", "y")),
    )
    x = ints(8 * tile)
    np.testing.assert_array_equal(simulate(design, {"x": x})["y"], x[tile:] + 1)


@pytest.mark.parametrize("end", ["producer", "consumer"])
def test_iter_count_bounds_a_memtile_dma(npu1, end):
    """A depth-2 memtile end with iter_count k moves 2k objects, then stops."""
    design = examples.passthrough(npu1, 4096, 1024)
    fifo = "out" if end == "producer" else "in"
    np.testing.assert_array_equal(
        simulate(with_fifo(design, fifo, iter_count=2), {"x": (x := ints(4096))})["y"], x
    )
    with pytest.raises(DeadlockError, match="2048 of 4096 elements moved"):
        simulate(with_fifo(design, fifo, iter_count=1), {"x": x})


def test_repeat_count_on_a_core_producer(npu1):
    design = with_fifo(one_worker(npu1, add_one_body(1024)), "out", repeat_count=2)
    design = attrs.evolve(
        design,
        tensors=(design.tensors[0], Tensor("y", 8192, "i32", OUT)),
        sequence=(Fill("in", "x"), Drain("out", "y")),
    )
    x = ints(4096)
    expected = np.repeat((x + 1).reshape(4, 1024), 2, axis=0).reshape(-1)
    np.testing.assert_array_equal(simulate(design, {"x": x})["y"], expected)


# ---- tensors and traffic --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(examples.EXAMPLES))
def test_tensor_traffic_is_what_the_taps_move(npu1, name):
    design = examples.EXAMPLES[name](npu1)
    inputs = {t.name: ints(*t.shape) for t in design.tensors if t.direction.reads}
    traffic = simulate(design, inputs).traffic
    for tensor in design.tensors:
        taps = [
            (type(s), s.tap or TAP.linear(tensor.size))
            for s in design.tasks()
            if s.tensor == tensor.name
        ]
        read = sum(4 * tap.count for kind, tap in taps if kind is Fill)
        written = sum(4 * tap.count for kind, tap in taps if kind is Drain)
        assert traffic.tensors[tensor.name] == BytesMoved(read, written)
    assert traffic.ddr == BytesMoved(
        sum(b.read for b in traffic.tensors.values()),
        sum(b.written for b in traffic.tensors.values()),
    )


def test_the_shim_iteration_dimension_replays_the_tensor(npu1):
    design = examples.passthrough(npu1, 3072, 1024)
    three_times = Fill("in", "x", TAP(0, (3, 1024), (0, 1)))
    design = attrs.evolve(
        design,
        tensors=(Tensor("x", 1024, "i32"), design.tensors[1]),
        sequence=(three_times, design.sequence[1]),
    )
    x = ints(1024)
    result = simulate(design, {"x": x})
    np.testing.assert_array_equal(result["y"], np.tile(x, 3))
    assert result.traffic.tensors["x"] == BytesMoved(read=3 * 4096, written=0)


def test_tile_traffic_counts_every_send_and_receipt(npu1):
    result = simulate(examples.repeat(npu1, 1024, 3), {"x": ints(1024)})
    once, thrice = 1024 * 4, 3 * 1024 * 4
    assert result.traffic.tiles == {
        Tile(0, 0): BytesMoved(read=once, written=thrice),  # DDR: the fill reads, the drain writes
        Tile(0, 1): BytesMoved(read=thrice, written=once),  # the memtile takes one, sends three
    }
    sj = simulate(examples.split_join(npu1, 4096, 256, 4), {"x": ints(4096)})
    both_ways = 2 * 4096 * 4  # the whole tensor in from the shim and in from the cores
    assert sj.traffic.tiles[Tile(0, 1)] == BytesMoved(both_ways, both_ways)


def test_task_groups_finish_in_sequence_order(npu1):
    """Two groups, one half of the tensor each; a finish that waits for a
    drain whose fill comes after it can never return."""
    halves = [TAP.linear(2048), TAP.linear(2048, offset=2048)]
    design = examples.add_one(npu1)
    in_order = [
        statement
        for group, tap in zip("ab", halves)
        for statement in (
            Fill("in", "x", tap, group=group),
            Drain("out", "y", tap, group=group),
            Finish(group),
        )
    ]
    x = ints(4096)
    np.testing.assert_array_equal(
        simulate(attrs.evolve(design, sequence=in_order), {"x": x})["y"], x + 1
    )
    too_early = (Drain("out", "y", group="a"), Finish("a"), Fill("in", "x", group="a"))
    with pytest.raises(
        DeadlockError,
        match=re.escape(
            "runtime sequence: waits at sequence[1] (finish of group a) for sequence[0] drain of "
            "fifo out into y (0 of 4096 elements moved)"
        ),
    ):
        simulate(attrs.evolve(design, sequence=too_early), {"x": x})


def test_inout_tensors_keep_what_no_drain_writes(npu1):
    design = examples.add_one(npu1, 2048, 1024)
    design = attrs.evolve(
        design,
        tensors=(design.tensors[0], Tensor("y", 4096, "i32", INOUT)),
        sequence=(Fill("in", "x"), Drain("out", "y", TAP.linear(2048, offset=1024))),
    )
    x, y = ints(2048), ints(4096)
    result = simulate(design, {"x": x, "y": y})
    np.testing.assert_array_equal(result["y"], np.concatenate([y[:1024], x + 1, y[3072:]]))


def test_the_callers_arrays_are_never_written(npu1):
    x = ints(4096)
    y = np.zeros(4096, np.int32)
    before = x.copy()
    result = simulate(examples.add_one(npu1), {"x": x, "y": y})
    np.testing.assert_array_equal(x, before)
    assert not y.any() and result["y"] is not y
    assert result["x"] is not x
