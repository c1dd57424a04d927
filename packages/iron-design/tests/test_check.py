"""Each rule of `check`: a design that breaks it, named by tile, subject,
number and limit, and one exactly at the limit that passes. Limits are read
from the Device, never restated."""

import attrs
import pytest

from iron.core import Device
from iron.core.spec import IN, OUT
from iron.design.check import Report, Violation, check, validate
from iron.design.examples import EXAMPLES, add_one, passthrough, repeat, split_join
from iron.design.model import (
    I32_MAX,
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    DesignError,
    Drain,
    Fill,
    Finish,
    Kernel,
    LocalBuffer,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    Release,
    Scalar,
    Tensor,
    Tile,
    Worker,
    core,
    forward,
    memtile,
    shim,
    shipped,
    split,
)


def copy_model(x, y):
    y[...] = x


def _copy_kernel(size: int, dtype: str = "i32") -> Kernel:
    line = Memref((size,), dtype)
    return Kernel("copy", (line, line), shipped("iron.design", "kernels/copy.cc"), copy_model)


COPY = (
    Acquire("in"),
    Acquire("out"),
    Call(_copy_kernel(8), (Obj("in"), Obj("out"))),
    Release("in"),
    Release("out"),
)


def _relay(device, body=COPY, size=8, dtype="i32", *, worker=None, params=(), **in_fifo) -> Design:
    """The runtime fills `in`, worker w copies each object to `out`, the
    runtime drains it; `in_fifo` changes the `in` fifo."""
    fifo = ObjectFifo("in", size, dtype, shim(), (core("w"),))
    return Design(
        "relay",
        device,
        (Tensor("x", 4 * size, dtype, IN), Tensor("y", 4 * size, dtype, OUT)),
        (attrs.evolve(fifo, **in_fifo), ObjectFifo("out", size, dtype, core("w"), (shim(),))),
        (worker or Worker("w", body),),
        (Fill("in", "x"), Drain("out", "y")),
        params=params,
    )


def _broken(design, rule: str) -> list[Violation]:
    return [v for v in check(design).violations if v.rule == rule]


def _with_fifo(design, name, **changes):
    return attrs.evolve(
        design,
        fifos=tuple(attrs.evolve(f, **changes) if f.name == name else f for f in design.fifos),
    )


def _with_worker(design, name, **changes):
    return attrs.evolve(
        design,
        workers=tuple(attrs.evolve(w, **changes) if w.name == name else w for w in design.workers),
    )


# ---- the examples ----------------------------------------------------------------


@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_the_examples_fit_both_devices(device, example):
    report = check(EXAMPLES[example](Device.from_name(device)))
    assert report.ok and report.violations == ()
    assert str(report) == f"{example}: fits the device"


def test_validate_raises_listing_every_violation(npu1):
    assert validate(add_one(npu1)) is None
    design = _with_worker(add_one(npu1, n=16384, tile=4096), "adder", stack_size=2048)
    design = _with_fifo(design, "in", repeat_count=2)
    report = check(design)
    assert [v.rule for v in report.violations] == ["repeat_count", "core memory"]
    with pytest.raises(DesignError) as raised:
        validate(design)
    assert str(raised.value) == str(report)
    assert str(report).splitlines() == [
        "add_one: 2 violation(s)",
        *(f"  {v}" for v in report.violations),
    ]


# ---- memory ----------------------------------------------------------------------


def test_core_memory_exactly_full_passes_and_one_element_more_fails(npu1):
    tile = 1024
    pools = 2 * 2 * 4 * tile  # two i32 fifos of two objects each
    stack = npu1.core_bytes - pools
    full = _with_worker(add_one(npu1, n=4 * tile, tile=tile), "adder", stack_size=stack)
    assert check(full).ok
    over = _with_worker(add_one(npu1, n=4 * (tile + 1), tile=tile + 1), "adder", stack_size=stack)
    (v,) = check(over).violations
    assert (v.tile, v.subject, v.rule, v.found, v.limit) == (
        Tile(0, 2), "", "core memory", npu1.core_bytes + 4 * 4, npu1.core_bytes,
    )  # fmt: skip
    object_bytes = 4 * (tile + 1)
    assert str(v) == (
        f"add_one: tile (0, 2): core memory {npu1.core_bytes + 16} B > {npu1.core_bytes} B: "
        f"stack {stack} B + fifo in 2 x {object_bytes} B + fifo out 2 x {object_bytes} B"
    )


def test_core_buffers_count_against_core_memory(npu1):
    design = add_one(npu1, n=4096, tile=1024)
    room = npu1.core_bytes - npu1.core_stack_bytes - 4 * 4096
    full = _with_worker(design, "adder", buffers=(LocalBuffer("acc", room // 4, "i32"),))
    assert check(full).ok
    over = _with_worker(design, "adder", buffers=(LocalBuffer("acc", room // 4 + 1, "i32"),))
    (v,) = _broken(over, "core memory")
    assert v.found == npu1.core_bytes + 4 and f" + buffer acc {room + 4} B + " in v.detail


def test_memtile_memory_exactly_full_passes_and_one_element_more_fails():
    narrow = Device.from_name("npu1", columns=1)  # no neighbour to spill to
    tile = narrow.memtile_bytes // (2 * 4)  # two i32 objects fill it
    assert check(passthrough(narrow, n=2 * tile, tile=tile)).ok
    over = passthrough(narrow, n=2 * (tile + 1), tile=tile + 1)
    (v,) = check(over).violations
    assert (v.tile, v.rule, v.found, v.limit) == (
        Tile(0, 1), "memtile memory", narrow.memtile_bytes + 8, narrow.memtile_bytes,
    )  # fmt: skip
    # with neighbours, the lowering spills the second buffer and it fits
    assert check(passthrough(Device.from_name("npu1"), n=2 * (tile + 1), tile=tile + 1)).ok


# ---- channels, locks, BDs ---------------------------------------------------------


def _fan_in(device, fifos: int, pinned: bool = False) -> Design:
    """`fifos` runtime fills each into its own worker, or all into worker w0."""
    names = [f"in{i}" for i in range(fifos)]
    producer = shim(0) if pinned else shim()
    return Design(
        "fan_in",
        device,
        (Tensor("x", 8 * fifos, "i32", IN),),
        tuple(
            ObjectFifo(n, 8, "i32", producer, (core(f"w{i}" if pinned else "w0"),))
            for i, n in enumerate(names)
        ),
        tuple(
            Worker(f"w{i}", tuple(op for n in mine for op in (Acquire(n), Release(n))))
            for i, mine in enumerate([[n] for n in names] if pinned else [names])
        ),
        tuple(Fill(n, "x", TAP.linear(8, offset=8 * i)) for i, n in enumerate(names)),
    )


def test_core_dma_channels_per_direction(npu1):
    most = npu1.limits("core").dma_channels
    assert check(_fan_in(npu1, most)).ok
    (v,) = check(_fan_in(npu1, most + 1)).violations
    assert (v.tile, v.rule, v.found, v.limit) == (Tile(0, 2), "S2MM channels", most + 1, most)
    assert v.detail == ", ".join(f"in{i}" for i in range(most + 1))


def test_shim_dma_channels_per_direction(npu1):
    most = npu1.limits("shim").dma_channels
    assert check(_fan_in(npu1, most, pinned=True)).ok
    (v,) = check(_fan_in(npu1, most + 1, pinned=True)).violations
    assert (v.tile, v.rule, v.found, v.limit) == (Tile(0, 0), "MM2S channels", most + 1, most)


def _scatter(device, lanes: int) -> Design:
    """A memtile split of one runtime object across `lanes` workers."""
    outs = [f"in{i}" for i in range(lanes)]
    return Design(
        "scatter",
        device,
        (Tensor("x", 8 * lanes, "i32", IN),),
        (
            ObjectFifo("in", 8 * lanes, "i32", shim(), (memtile("s"),)),
            *(ObjectFifo(o, 8, "i32", memtile("s"), (core(f"w{i}"),)) for i, o in enumerate(outs)),
        ),
        tuple(Worker(f"w{i}", (Acquire(o), Release(o))) for i, o in enumerate(outs)),
        (Fill("in", "x"),),
        links=(split("s", "in", outs, [8 * i for i in range(lanes)]),),
    )


def test_memtile_dma_channels_per_direction(npu1):
    most = npu1.limits("memtile").dma_channels
    assert check(_scatter(npu1, most)).ok
    (v,) = _broken(_scatter(npu1, most + 1), "MM2S channels")
    assert (v.tile, v.found, v.limit) == (Tile(0, 1), most + 1, most)


def _shared(device, fifos: int) -> Design:
    """Worker a hands `fifos` fifos to its north neighbour b through shared memory."""
    names = [f"mid{i}" for i in range(fifos)]
    hand = tuple(op for n in names for op in (Acquire(n), Release(n)))
    return Design(
        "shared",
        device,
        (),
        tuple(ObjectFifo(n, 8, "i32", core("a"), (core("b"),)) for n in names),
        (Worker("a", hand, tile=Tile(0, 2)), Worker("b", hand, tile=Tile(0, 3))),
        (),
    )


def test_core_locks(npu1):
    pairs = npu1.limits("core").locks // 2  # each pool takes a producer and a consumer lock
    assert check(_shared(npu1, pairs)).ok
    (v,) = check(_shared(npu1, pairs + 1)).violations
    assert (v.tile, v.rule, v.found, v.limit) == (Tile(0, 2), "locks", 2 * pairs + 2, 2 * pairs)
    assert v.detail == " + ".join(f"mid{i} 2" for i in range(pairs + 1))


def test_core_bds(npu1):
    most = npu1.limits("core").bds
    # a BD per object of each pool: out keeps two, in takes the rest
    deep = _relay(npu1, consumers=(core("w", depth=most - 2),))
    assert check(deep).ok
    (v,) = check(_relay(npu1, consumers=(core("w", depth=most - 1),))).violations
    assert (v.tile, v.rule, v.found, v.limit) == (Tile(0, 2), "BDs", most + 1, most)
    assert v.detail == f"out (MM2S 0) 2 + in (S2MM 0) {most - 1}"


def _two_forwards(device, depth_a: int, depth_b: int, tasks: int = 1) -> Design:
    """Links a and b on one memtile, each forwarding its own runtime stream;
    the runtime queues `tasks` fills and drains on each."""
    fifos, links, sequence = [], [], []
    for name, depth in (("a", depth_a), ("b", depth_b)):
        fifos += [
            ObjectFifo(f"{name}_in", 8, "i32", shim(0), (memtile(name),), depth=depth),
            ObjectFifo(f"{name}_out", 8, "i32", memtile(name), (shim(0),), depth=depth),
        ]
        links.append(forward(name, f"{name}_in", f"{name}_out", tile=Tile(0, 1)))
        part = [TAP.linear(8, offset=8 * i) for i in range(tasks)]
        sequence += [Fill(f"{name}_in", "x", tap) for tap in part]
        sequence += [Drain(f"{name}_out", "y", tap) for tap in part]
    tensors = (Tensor("x", 8 * tasks, "i32", IN), Tensor("y", 8 * tasks, "i32", OUT))
    return Design("two", device, tensors, tuple(fifos), (), tuple(sequence), links=tuple(links))


def test_memtile_bds_per_channel_parity(npu1):
    half = npu1.limits("memtile").bds // 2
    # link a's channels are both number 0 (even), link b's both 1 (odd); each has
    # an S2MM and an MM2S chain with a BD per object
    full = _two_forwards(npu1, half // 2, half // 2)
    assert check(full).ok
    (v,) = check(_two_forwards(npu1, half // 2, half // 2 + 1)).violations
    assert (v.tile, v.rule, v.found, v.limit) == (Tile(0, 1), "odd-channel BDs", half + 2, half)
    (v,) = check(_two_forwards(npu1, half // 2 + 1, half // 2)).violations
    assert (v.rule, v.found) == ("even-channel BDs", half + 2)
    assert v.detail == f"a_out (MM2S 0) {half // 2 + 1} + a_in (S2MM 0) {half // 2 + 1}"


def test_bd_length(npu1):
    words = npu1.limits("memtile").bd_words
    longest = passthrough(npu1, n=2 * words, tile=words)
    assert check(_with_fifo(_with_fifo(longest, "in", depth=1), "out", depth=1)).ok
    longer = passthrough(npu1, n=2 * (words + 1), tile=words + 1)
    longer = _with_fifo(_with_fifo(longer, "in", depth=1), "out", depth=1)
    found = _broken(longer, "BD length")
    assert [(v.tile, v.subject, v.found, v.limit) for v in found] == [
        (Tile(0, 1), "fifo out", words + 1, words),
        (Tile(0, 1), "fifo in", words + 1, words),
    ]
    assert check(longer).violations == tuple(found)


def test_shim_bd_length_is_bounded_by_the_dialects_i32_len(npu1):
    """A shim BD's length field holds 2^32 - 1 words, more than a dma_bd's
    i32 `len` can say: the i32 is the bound, refused when the TAP is made."""
    assert npu1.limits("shim").bd_words >= I32_MAX
    assert TAP.linear(I32_MAX).count == I32_MAX
    with pytest.raises(DesignError, match=r"TAP: sizes\[0\] = 2147483648 is outside 1..2147483647"):
        TAP.linear(I32_MAX + 1)
    with pytest.raises(DesignError, match=r"its BD moves 2147483648 elements .* i32 len"):
        TAP(0, (64, 2, 2**15, 2**15), (0, 2**30, 2**15, 1))
    assert TAP(0, (64, 1, 2**15, 2**16 - 1), (0, 0, 2**16, 1)).count == 64 * (2**31 - 2**15)


# ---- runtime tasks -------------------------------------------------------------------


def _fills(device, count: int, finish_every: int = 0) -> Design:
    """`count` fills of one fifo, with a Finish after every `finish_every`."""
    design = passthrough(device, n=8 * count, tile=8)
    sequence = []
    for i in range(count):
        sequence.append(Fill("in", "x", TAP.linear(8, offset=8 * i)))
        if finish_every and (i + 1) % finish_every == 0:
            sequence.append(Finish())
    sequence.append(Drain("out", "y"))
    return attrs.evolve(design, sequence=tuple(sequence))


def test_tasks_queued_per_shim_channel(npu1):
    depth = npu1.task_queue_depth
    assert check(_fills(npu1, depth)).ok
    (v,) = check(_fills(npu1, depth + 1)).violations
    assert (v.tile, v.subject, v.rule, v.found, v.limit) == (
        Tile(0, 0), f"transfer {depth} (fill in from x)", "tasks queued on the channel",
        depth + 1, depth,
    )  # fmt: skip
    # a finished group shows its tasks done only if it waited for something
    # that needs them (a drain the fills feed)
    (v,) = check(_fills(npu1, 2 * depth, finish_every=depth)).violations
    assert (v.rule, v.found) == ("tasks queued on the channel", depth + 1)
    design = _fills(npu1, 2 * depth)
    fills = design.sequence[: 2 * depth]
    half = TAP.linear(8 * depth)
    drained = attrs.evolve(
        design,
        sequence=(
            *fills[:depth], Drain("out", "y", half), Finish(),
            *fills[depth:], Drain("out", "y", attrs.evolve(half, offset=8 * depth)),
        ),
    )  # fmt: skip
    assert check(drained).ok


def test_tasks_live_per_shim_tile(npu1):
    per_channel = npu1.task_queue_depth
    # four channels (two each way) with full queues hold every shim BD
    assert 2 * npu1.shim_dma_channels * per_channel == npu1.bd_ids_per_shim
    full = _two_forwards(npu1, 2, 2, tasks=per_channel)
    assert check(full).ok
    one_more = attrs.evolve(full, sequence=(*full.sequence, Fill("a_in", "x", TAP.linear(8))))
    found = _broken(one_more, "live tasks on the shim")
    last = len(full.sequence)
    assert [(v.tile, v.subject, v.found, v.limit) for v in found] == [
        (Tile(0, 0), f"transfer {last} (fill a_in from x)", npu1.bd_ids_per_shim + 1,
         npu1.bd_ids_per_shim),
    ]  # fmt: skip


# ---- runtime access patterns ---------------------------------------------------------


def _fill(device, tap: TAP, dtype: str = "i32", tensor: int | None = None, obj: int = 2):
    """A fill of `x` through `tap` into `obj`-element objects; its violations."""
    size = (
        tensor or tap.offset + sum(max(0, (s - 1) * t) for s, t in zip(tap.sizes, tap.strides)) + 1
    )
    design = Design(
        "fill",
        device,
        (Tensor("x", size, dtype, IN), Tensor("y", tap.count, dtype, OUT)),
        (
            ObjectFifo("in", obj, dtype, shim(), (memtile("f"),)),
            ObjectFifo("out", obj, dtype, memtile("f"), (shim(),)),
        ),
        (),
        (Fill("in", "x", tap), Drain("out", "y")),
        links=(forward("f", "in", "out"),),
    )
    return [v for v in check(design).violations if v.subject.startswith("transfer 0")]


def _limits(device):
    return device.limits("shim")


def test_shim_iterations(npu1):
    most = npu1.shim_max_iterations
    assert _fill(npu1, TAP(0, (most, 1, 1, 4), (0, 0, 0, 1))) == []  # stride 0: the same 4 again
    (v,) = _fill(npu1, TAP(0, (most + 1, 1, 1, 4), (0, 0, 0, 1)))
    assert (v.tile, v.subject, v.rule, v.found, v.limit) == (
        Tile(0, 0), "transfer 0 (fill in from x)", "iterations", most + 1, most,
    )  # fmt: skip


def test_shim_d0_wrap_counts_words(npu1):
    wrap = _limits(npu1).max_wrap
    # two rows of `wrap` words, one element apart: not contiguous, so wraps apply
    assert _fill(npu1, TAP(0, (2, wrap), (wrap + 1, 1))) == []
    (v,) = _fill(npu1, TAP(0, (2, wrap + 1), (wrap + 2, 1)))
    assert (v.rule, v.found, v.limit, v.unit) == ("d0 wrap", wrap + 1, wrap, " words")
    # bf16: two elements to a word
    assert _fill(npu1, TAP(0, (2, 2 * wrap), (2 * wrap + 2, 1)), "bf16") == []
    (v,) = _fill(npu1, TAP(0, (2, 2 * wrap + 2), (2 * wrap + 4, 1)), "bf16")
    assert (v.rule, v.found) == ("d0 wrap", wrap + 1)


def test_contiguous_transfers_are_exempt_from_wraps(npu1):
    wrap = _limits(npu1).max_wrap
    assert _fill(npu1, TAP(0, (2, 4 * wrap), (4 * wrap, 1))) == []  # row-major: linear mode
    (v,) = _fill(npu1, TAP(0, (2, 4 * wrap), (4 * wrap + 2, 1)))
    assert (v.rule, v.found) == ("d0 wrap", 4 * wrap)


def test_shim_d1_wrap(npu1):
    wrap = _limits(npu1).max_wrap
    assert _fill(npu1, TAP(0, (wrap, 2), (3, 1))) == []
    (v,) = _fill(npu1, TAP(0, (wrap + 1, 2), (3, 1)))
    assert (v.rule, v.found, v.limit) == ("d1 wrap", wrap + 1, wrap)


def test_shim_strides_in_words(npu1):
    most = _limits(npu1).max_stride
    assert _fill(npu1, TAP(0, (2, 2), (most, 1))) == []
    (v,) = _fill(npu1, TAP(0, (2, 2), (most + 1, 1)))
    assert (v.rule, v.found, v.limit, v.unit) == ("d1 stride", most + 1, most, " words")


@pytest.mark.parametrize(
    "tap, dtype, broken",
    [
        (TAP(0, (2, 2), (4, 1)), "bf16", None),
        (TAP(0, (2, 2), (3, 1)), "bf16", ("d1 stride", 6, 4, "not a multiple of")),
        (TAP(0, (4,), (2,)), "i32", None),  # whole words may skip
        (TAP(0, (4,), (2,)), "bf16", ("d0 stride", 2, 1, "!=")),  # half words may not
        (TAP(0, (1, 2), (0, 1)), "i32", None),  # a size-1 dimension's stride is never used
        (TAP(0, (2, 2), (0, 1)), "i32", ("d1 stride", 0, 1, "<")),
        (TAP(0, (2, 1, 1, 2), (0, 0, 0, 1)), "i32", None),  # iteration stride 0 repeats
        (TAP(2, (2, 1, 1, 2), (-2, 0, 0, 1)), "i32", ("iteration stride", -2, 0, "<")),
        (TAP(2, (2,), (1,)), "bf16", None),
        (TAP(1, (2,), (1,)), "bf16", ("offset", 2, 4, "not a multiple of")),
        (TAP(0, (2, 3), (4, 1)), "bf16", ("d0 length", 6, 4, "not a multiple of")),
    ],
)
def test_shim_granules_and_signs(npu1, tap, dtype, broken):
    found = [(v.rule, v.found, v.limit, v.relation) for v in _fill(npu1, tap, dtype)]
    assert found == ([broken] if broken else [])


def test_a_transfer_stays_inside_its_tensor(npu1):
    assert _fill(npu1, TAP(0, (4,), (1,)), tensor=4) == []
    (v,) = _fill(npu1, TAP(0, (4,), (1,)), tensor=3)
    assert (v.rule, v.found, v.limit) == ("element", 3, "0..2 of tensor x")
    assert str(v).startswith("fill: tile (0, 0): transfer 0 (fill in from x): element 3 outside")


def test_a_transfer_moves_whole_objects(npu1):
    assert _fill(npu1, TAP.linear(8), obj=4) == []
    (v,) = _fill(npu1, TAP.linear(6), obj=4)
    assert (v.rule, v.found, v.limit, v.relation) == ("elements", 6, 4, "not a multiple of")


# ---- fifo reorders ---------------------------------------------------------------------


def _reordered(device, dims, size: int = 8, dtype: str = "i32"):
    """Worker w's one-object end of `in` lays the stream out by `dims`; the violations."""
    design = Design(
        "reorder",
        device,
        (Tensor("x", size, dtype, IN),),
        (ObjectFifo("in", size, dtype, shim(), (core("w", dims_from_stream=dims),), depth=1),),
        (Worker("w", (Acquire("in"), Release("in"))),),
        (Fill("in", "x"),),
    )
    return list(check(design).violations)


def test_reorders_have_no_place_on_a_shim(npu1):
    (v,) = check(_relay(npu1, dims_to_stream=[(2, 4), (4, 1)])).violations
    assert (v.tile, v.subject, v.rule, v.found, v.limit) == (
        Tile(0, 0), "fifo in", "dims_to_stream dimensions", 2, 0,
    )  # fmt: skip


def test_reorder_dimensions_per_tile_kind(npu1):
    most = npu1.limits("core").bd_dims
    assert _reordered(npu1, [(1, 8)] * (most - 1) + [(8, 1)]) == []
    (v,) = _reordered(npu1, [(1, 8)] * most + [(8, 1)])
    assert (v.tile, v.subject, v.rule, v.found, v.limit) == (
        Tile(0, 2), "fifo in", "dims_from_stream dimensions", most + 1, most,
    )  # fmt: skip


def test_core_reorder_wraps_count_words(npu1):
    wrap = npu1.limits("core").max_wrap
    assert _reordered(npu1, [(wrap, 1)], size=wrap) == []
    (v,) = _reordered(npu1, [(wrap + 1, 1)], size=wrap + 1)
    assert (v.rule, v.found, v.limit, v.unit) == ("dims_from_stream d0 wrap", wrap + 1, wrap, " words")  # fmt: skip
    # i16: two elements to a word
    assert _reordered(npu1, [(2 * wrap, 1)], size=2 * wrap, dtype="i16") == []
    (v,) = _reordered(npu1, [(2 * wrap + 2, 1)], size=2 * wrap + 2, dtype="i16")
    assert (v.rule, v.found) == ("dims_from_stream d0 wrap", wrap + 1)
    # the other dimensions count elements
    assert _reordered(npu1, [(wrap, 1), (1, 1)], size=wrap) == []
    (v,) = _reordered(npu1, [(wrap + 1, 1), (1, 1)], size=wrap + 1)
    assert (v.rule, v.found, v.unit) == ("dims_from_stream d1 wrap", wrap + 1, "")


def test_memtile_reorders_take_the_memtile_limits(npu1):
    wrap = npu1.limits("memtile").max_wrap
    assert wrap > npu1.limits("core").max_wrap
    fits = passthrough(npu1, n=2 * wrap, tile=2 * wrap)
    assert check(_with_fifo(fits, "out", dims_to_stream=[(wrap, 2), (2, 1)])).ok
    design = passthrough(npu1, n=2 * wrap + 2, tile=2 * wrap + 2)
    (v,) = check(_with_fifo(design, "out", dims_to_stream=[(wrap + 1, 2), (2, 1)])).violations
    assert (v.tile, v.subject, v.rule, v.found, v.limit) == (
        Tile(0, 1), "fifo out", "dims_to_stream d1 wrap", wrap + 1, wrap,
    )  # fmt: skip


def test_core_reorder_strides(npu1):
    """(A stride at the core's limit needs an object as large as the core's
    memory to order whole, so these dims also leave most of it unordered.)"""
    most = npu1.limits("core").max_stride

    def strides(dims, size):
        return [v for v in _reordered(npu1, dims, size=size) if "stride" in v.rule]

    assert strides([(2, most), (1, 1)], size=most + 2) == []
    (v,) = strides([(2, most + 1), (1, 1)], size=most + 2)
    assert (v.rule, v.found, v.limit) == ("dims_from_stream d1 stride", most + 1, most)
    (v,) = _reordered(npu1, [(2, 0), (4, 1)])
    assert (v.rule, v.found, v.limit, v.relation) == ("dims_from_stream d1 stride", 0, 1, "<")


def test_reorders_order_every_element_of_their_bd(npu1):
    """The simulator (and the DMA's address generator) take a BD's
    dimensions for all of it: ones that cover less are refused."""
    assert _reordered(npu1, [(2, 1), (4, 2)]) == []
    (v,) = _reordered(npu1, [(2, 1), (3, 2)])
    assert (v.tile, v.rule, v.found, v.limit) == (Tile(0, 2), "dims_from_stream elements", 6, "8")


def test_reorders_stay_inside_the_object(npu1):
    assert _reordered(npu1, [(2, 4), (4, 1)]) == []
    (v,) = _reordered(npu1, [(2, 8), (4, 1)])
    assert (v.rule, v.found, v.limit, v.relation) == ("dims_from_stream element", 11, 8, ">=")


# ---- fifos and workers -------------------------------------------------------------------


def test_acquires_are_cumulative_and_bounded_by_the_ends_depth(npu1):
    twice = (Acquire("in", 2), Acquire("in", 2), Release("in", 2))
    assert _broken(_relay(npu1, twice), "acquire") == []  # holds 2, not 4
    too_many = (Acquire("in", 2), Acquire("in", 3), Release("in", 3))
    (v,) = _broken(_relay(npu1, too_many), "acquire")
    assert (v.tile, v.subject, v.found, v.limit) == (Tile(0, 2), "fifo in", 3, "depth 2")
    deeper_end = _relay(npu1, too_many, consumers=(core("w", depth=3),))
    assert _broken(deeper_end, "acquire") == []


def test_releases_never_exceed_what_is_held(npu1):
    (v,) = _broken(_relay(npu1, (Acquire("in", 1), Release("in", 2))), "release")
    assert (v.tile, v.subject, v.found, v.limit) == (Tile(0, 2), "fifo in", 2, "1 held")


def test_producer_locks_count_every_repeat(npu1):
    most = npu1.max_lock_value
    assert check(repeat(npu1, n=8, times=most)).ok  # one object, sent `most` times
    (v,) = check(repeat(npu1, n=8, times=most + 1)).violations
    assert (v.tile, v.subject, v.rule, v.found, v.limit) == (
        Tile(0, 1), "fifo in", "producer lock start", most + 1, most,
    )  # fmt: skip
    deep = _with_fifo(_with_fifo(passthrough(npu1, n=8, tile=8), "in", depth=most + 1), "out", depth=most + 1)  # fmt: skip
    assert [(v.subject, v.found) for v in _broken(deep, "producer lock start")] == [
        ("fifo in", most + 1)
    ]


def test_repeat_count_rules(npu1):
    (v,) = _broken(_relay(npu1, repeat_count=2), "repeat_count")
    assert (v.tile, v.subject, v.found, v.limit) == (None, "fifo in", 2, "a shim producer")
    most = npu1.max_repeat_count
    assert _broken(repeat(npu1, n=8, times=most), "repeat_count") == []
    (v,) = _broken(repeat(npu1, n=8, times=most + 1), "repeat_count")
    assert (v.subject, v.found, v.limit) == ("fifo out", most + 1, most)


def test_iter_count_rules(npu1):
    most = npu1.max_repeat_count
    (v,) = _broken(_relay(npu1, iter_count=2), "iter_count")
    assert (v.subject, v.found, v.relation) == ("fifo in", 2, "not allowed on")
    assert check(_with_fifo(passthrough(npu1), "out", iter_count=most)).ok
    (v,) = check(_with_fifo(passthrough(npu1), "out", iter_count=most + 1)).violations
    assert (v.rule, v.subject, v.found, v.limit) == ("iter_count", "fifo out", most + 1, most)


def test_objects_are_whole_words(npu1):
    assert check(passthrough(npu1, n=8, tile=2, dtype="bf16")).ok
    found = check(passthrough(npu1, n=6, tile=3, dtype="bf16")).violations
    assert [(v.subject, v.rule, v.found, v.limit) for v in found] == [
        ("fifo in", "object", 6, npu1.dma_granule),
        ("fifo out", "object", 6, npu1.dma_granule),
    ]


# ---- kernel calls ----------------------------------------------------------------------


def _calls(device, *args, buffers=(), params=()):
    body = (Acquire("in"), Acquire("out"), Call(_copy_kernel(8), args), Release("in"), Release("out"))  # fmt: skip
    design = _relay(device, worker=Worker("w", body, buffers=buffers), params=params)
    return [v for v in check(design).violations if v.subject == "kernel copy"]


def test_kernel_calls_pass_objects_they_hold(npu1):
    assert _calls(npu1, Obj("in"), Obj("out")) == []
    (v,) = _calls(npu1, Obj("in"), Obj("out", 1))
    assert (v.rule, v.found, v.limit) == ("argument 1 object", 1, "1 held")


def test_kernel_buffers_match_in_type_and_count(npu1):
    acc = LocalBuffer("acc", 8, "i32")
    assert _calls(npu1, Obj("in"), Buf("acc"), buffers=(acc,)) == []
    (v,) = _calls(npu1, Obj("in"), Buf("acc"), buffers=(LocalBuffer("acc", 4, "i32"),))
    assert (v.rule, v.found, v.limit) == ("argument 1 elements", 4, 8)
    (v,) = _calls(npu1, Obj("in"), Buf("acc"), buffers=(LocalBuffer("acc", 8, "i16"),))
    assert (v.rule, v.found, v.limit) == ("argument 1 element type", "i16", "i32")


def test_kernel_objects_match_in_type_and_count(npu1):
    def calls(design):
        return [(v.rule, v.found, v.limit) for v in check(design).violations if v.subject == "kernel copy"]  # fmt: skip

    wide = _relay(npu1, COPY, size=16)  # 16-element objects for an 8-element kernel
    assert calls(wide) == [("argument 0 elements", 16, 8), ("argument 1 elements", 16, 8)]
    narrow = _relay(npu1, COPY, dtype="i16")
    assert calls(narrow) == [
        ("argument 0 element type", "i16", "i32"),
        ("argument 1 element type", "i16", "i32"),
    ]


def scale_model(x, y, factor):
    y[...] = x * factor


def test_kernel_scalars_take_ints_and_params(npu1):
    line = Memref((8,), "i32")
    scale = Kernel("scale", (line, line, Scalar()), shipped("p", "scale.cc"), scale_model)

    def run(factor):
        body = (Acquire("in"), Acquire("out"), Call(scale, (Obj("in"), Obj("out"), factor)),
                Release("in"), Release("out"))  # fmt: skip
        design = _relay(npu1, body, params=("factor",))
        return [v for v in check(design).violations if v.subject == "kernel scale"]

    assert run(3) == [] and run(Param("factor")) == []
    with pytest.raises(DesignError, match="argument 2 is a scalar"):
        run(Obj("in"))


# ---- block floats ----------------------------------------------------------------------


def test_block_floats_fit_npu2_only(npu1, npu2):
    assert check(passthrough(npu2, n=64, tile=8, dtype="bfp16ebs8")).ok
    found = check(passthrough(npu1, n=64, tile=8, dtype="bfp16ebs8")).violations
    assert [(v.subject, v.rule, v.found) for v in found] == [
        ("tensor x", "element type", "bfp16ebs8"),
        ("tensor y", "element type", "bfp16ebs8"),
        ("fifo in", "element type", "bfp16ebs8"),
        ("fifo out", "element type", "bfp16ebs8"),
    ]
    assert found[0].limit == "npu1 (aie2)"


def test_block_float_kernels_and_buffers_fit_npu2_only(npu1, npu2):
    body = (Acquire("in"), Acquire("out"), Call(_copy_kernel(8, "bfp16ebs8"), (Obj("in"), Buf("b"))),
            Release("in"), Release("out"))  # fmt: skip
    worker = Worker("w", body, buffers=(LocalBuffer("b", 8, "bfp16ebs8"),))
    assert [v for v in check(_relay(npu2, worker=worker)).violations if v.rule == "element type"] == []  # fmt: skip
    found = _broken(_relay(npu1, worker=worker), "element type")
    assert [v.subject for v in found] == ["worker w", "kernel copy"]


# ---- placement -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pin, subject, what",
    [
        ({"worker": Tile(0, 1)}, "worker adder", "a core tile"),
        ({"worker": Tile(4, 2)}, "worker adder", "a core tile"),
        ({"shim": 4}, "fifo in", "a shim tile"),
    ],
)
def test_placement_outside_the_device_or_on_the_wrong_kind(npu1, pin, subject, what):
    design = add_one(npu1)
    if "worker" in pin:
        design = _with_worker(design, "adder", tile=pin["worker"])
    else:
        design = _with_fifo(design, "in", producer=shim(pin["shim"]))
    (v,) = check(design).violations
    tile = pin.get("worker") or Tile(pin["shim"], 0)
    assert (v.tile, v.subject, v.rule, v.found, v.limit) == (tile, subject, "tile", str(tile), what)
    assert v.detail == "npu1 at 4 columns has columns 0..3, " + (
        "core rows 2..5" if "worker" in pin else "shim row 0"
    )


def test_the_last_column_is_on_the_device(npu1):
    assert check(_with_worker(add_one(npu1), "adder", tile=Tile(npu1.columns - 1, 2))).ok


def test_links_sit_on_memtiles(npu1):
    design = passthrough(npu1)
    moved = attrs.evolve(design, links=(attrs.evolve(design.links[0], tile=Tile(0, 2)),))
    (v,) = check(moved).violations
    assert (v.subject, v.tile, v.limit) == ("link fwd", Tile(0, 2), "a memtile")


def test_one_worker_per_tile(npu1):
    design = split_join(npu1, workers=2, n=512)
    design = _with_worker(
        _with_worker(design, "adder0", tile=Tile(0, 2)), "adder1", tile=Tile(0, 2)
    )
    (v,) = check(design).violations
    assert (v.tile, v.subject, v.rule, v.found, v.limit, v.detail) == (
        Tile(0, 2), "worker adder1", "workers on one tile", 2, 1, "adder0, adder1",
    )  # fmt: skip


def test_more_workers_than_cores_is_a_violation():
    narrow = Device.from_name("npu1", columns=1)
    design = split_join(Device.from_name("npu1"), workers=narrow.cores + 1, n=256 * 5)
    (v,) = check(attrs.evolve(design, device=narrow)).violations
    assert (v.rule, v.found, v.limit) == ("workers", narrow.cores + 1, narrow.cores)


def test_reports_are_values(npu1):
    report = check(add_one(npu1))
    assert report == Report("add_one", ()) and report.ok


def test_links_repeat_only_as_mlir_aies_lowering_can(npu1):
    design = split_join(npu1, workers=2, n=2048)
    unequal = _with_fifo(design, "in0", repeat_count=2)
    (v,) = check(unequal).violations
    assert (v.subject, v.rule, v.found) == ("link scatter", "destination repeat_counts", "2, 1")
    alike = _with_fifo(unequal, "in1", repeat_count=2)
    assert [v for v in check(alike).violations if v.subject == "link scatter"] == []
    (v,) = [v for v in check(_with_fifo(design, "out", repeat_count=2)).violations
            if v.subject == "link gather"]  # fmt: skip
    assert (v.rule, v.found) == ("destination repeat_count", 2)
