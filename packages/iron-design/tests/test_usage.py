import attrs
import pytest

from iron.core import Device
from iron.core.spec import IN, OUT
from iron.design.examples import add_one, passthrough, repeat, split_join
from iron.design.lower import lower
from iron.design.model import (
    TAP,
    Acquire,
    Design,
    Drain,
    Fill,
    Finish,
    ObjectFifo,
    Release,
    Tensor,
    Tile,
    Worker,
    core,
    forward,
    join,
    memtile,
    shim,
)
from iron.design.usage import MM2S, S2MM, usage


def _channels(used, direction):
    return [(c.index, c.fifo, c.bds) for c in used.channels_in(direction)]


def test_add_one_takes_a_stack_and_two_pools_on_its_core(npu1):
    tile = 512
    used = usage(add_one(npu1, n=4 * tile, tile=tile))
    core_tile = used[Tile(0, 2)]
    assert core_tile.kind == "core"
    assert [str(item) for item in core_tile.memory] == [
        f"stack {npu1.core_stack_bytes} B",
        f"fifo in 2 x {4 * tile} B",
        f"fifo out 2 x {4 * tile} B",
    ]
    assert core_tile.memory_bytes == npu1.core_stack_bytes + 2 * 2 * 4 * tile
    assert core_tile.memory_text() == " + ".join(map(str, core_tile.memory))
    # a consumer pool fills through S2MM, a producer pool drains through MM2S
    assert _channels(core_tile, S2MM) == [(0, "in", 2)]
    assert _channels(core_tile, MM2S) == [(0, "out", 2)]
    assert core_tile.lock_count == 4 and core_tile.bds == 4
    shim_tile = used[Tile(0, 0)]
    assert shim_tile.memory == () and shim_tile.bds == 2  # one fill and one drain, both live
    assert set(used) == {Tile(0, 0), Tile(0, 2)}


def _one_worker(device, acquire: int, depth: int, core_depth: int | None = None) -> Design:
    body = (Acquire("in", acquire), Release("in", acquire))
    return Design(
        "one",
        device,
        (Tensor("x", 64, "i32", IN),),
        (ObjectFifo("in", 8, "i32", shim(), (core("w", depth=core_depth),), depth=depth),),
        (Worker("w", body),),
        (Fill("in", "x"),),
    )


@pytest.mark.parametrize(
    "acquire, depth, core_depth, pool",
    [
        # one depth for every end: to_mlir writes that one number, and the
        # lowering sizes a core's pool to its largest acquire + 1
        # (`findObjectFifoSize`)
        (1, 4, None, 2),
        (2, 2, None, 3),
        (1, 1, None, 1),  # one object acquired one at a time: one buffer
        # depths that differ are written per endpoint and kept as given
        (1, 2, 5, 5),
        (2, 4, 2, 2),
    ],
)
def test_core_pools_hold_the_depth_mlir_aie_sizes(npu1, acquire, depth, core_depth, pool):
    used = usage(_one_worker(npu1, acquire, depth, core_depth))[Tile(0, 2)]
    (fifo,) = [item for item in used.memory if item.kind == "fifo"]
    assert (fifo.count, fifo.nbytes) == (pool, 32)
    assert used.channels[0].bds == pool
    assert used.locks[0].start == pool


def _pipeline(device, first: Tile, second: Tile, **fifo) -> Design:
    return Design(
        "pipe",
        device,
        (),
        (ObjectFifo("mid", 8, "i32", core("a"), (core("b"),), **fifo),),
        (
            Worker("a", (Acquire("mid"), Release("mid")), tile=first),
            Worker("b", (Acquire("mid"), Release("mid")), tile=second),
        ),
        (),
    )


@pytest.mark.parametrize(
    "first, second, holder",
    [
        (Tile(0, 2), Tile(0, 3), Tile(0, 2)),  # north and south reach each other: producer's
        (Tile(0, 2), Tile(1, 2), Tile(0, 2)),  # the consumer reaches its west neighbour
        (Tile(1, 2), Tile(0, 2), Tile(0, 2)),  # only the producer reaches: the consumer's
    ],
)
def test_neighbouring_cores_share_one_pool_without_dma(npu1, first, second, holder):
    used = usage(_pipeline(npu1, first, second, depth=3))
    assert [str(i) for i in used[holder].memory if i.kind == "fifo"] == ["fifo mid 3 x 32 B"]
    assert all(u.channels == () for u in used.values())
    assert [(lock.fifo, lock.count) for u in used.values() for lock in u.locks] == [("mid", 2)]


@pytest.mark.parametrize(
    "second, fifo",
    [
        (Tile(0, 4), {}),  # two rows apart
        (Tile(0, 3), {"dims_to_stream": [(2, 4), (4, 1)]}),
        (Tile(0, 3), {"repeat_count": 2}),
    ],
)
def test_far_or_reordering_or_repeating_core_fifos_use_dma(npu1, second, fifo):
    used = usage(_pipeline(npu1, Tile(0, 2), second, **fifo))
    assert [c.direction for c in used[Tile(0, 2)].channels] == [MM2S]
    assert [c.direction for c in used[second].channels] == [S2MM]
    assert [i.kind for i in used[second].memory] == ["stack", "fifo"]


def test_a_split_keeps_the_source_objects_and_a_join_the_destinations(npu1):
    workers, tile = 4, 256
    used = usage(split_join(npu1, n=4 * workers * tile, tile=tile, workers=workers))
    mem = used[Tile(0, 1)]
    assert [str(i) for i in mem.memory] == [
        f"fifo in 2 x {4 * workers * tile} B",
        f"fifo out 2 x {4 * workers * tile} B",
    ]
    # a lock pair per lane of each link
    assert [(lock.fifo, lock.count) for lock in mem.locks] == [("in", 8), ("out", 8)]
    # channels in the order the fifos are emitted (in, out, in0, out0, in1...),
    # each taking its tile's lowest free one; the pool's own channel takes a
    # BD per object per lane
    assert _channels(mem, S2MM) == [(0, "in", 8), (1, "out0", 2), (2, "out1", 2), (3, "out2", 2), (4, "out3", 2)]  # fmt: skip
    assert _channels(mem, MM2S) == [(0, "out", 8), (1, "in0", 2), (2, "in1", 2), (3, "in2", 2), (4, "in3", 2)]  # fmt: skip
    assert [c.words for c in mem.channels] == [tile] * 10  # each BD moves one lane's slice


def test_a_join_pool_takes_the_destination_depth(npu1):
    design = split_join(npu1, workers=2, n=512)
    fifos = [attrs.evolve(f, depth=3) if f.name == "out" else f for f in design.fifos]
    mem = usage(attrs.evolve(design, fifos=fifos))[Tile(0, 1)]
    assert [(i.name, i.count) for i in mem.memory] == [("in", 2), ("out", 3)]
    assert _channels(mem, MM2S)[0] == (0, "out", 3 * 2)
    assert _channels(mem, S2MM)[1:] == [(1, "out0", 3), (2, "out1", 3)]


def test_repeat_counts_multiply_bds_unless_one_bd_repeats_in_hardware(npu1):
    once = usage(repeat(npu1, times=4))[Tile(0, 1)]
    assert _channels(once, MM2S) == [(0, "out", 1)]
    assert once.locks[0].start == 4  # the producer lock counts every send
    design = repeat(npu1, times=4)
    deeper = [attrs.evolve(f, depth=2) for f in design.fifos]
    twice = usage(attrs.evolve(design, fifos=deeper))[Tile(0, 1)]
    assert _channels(twice, MM2S) == [(0, "out", 2 * 4)]
    assert twice.locks[0].start == 2 * 4
    # a BD chain bounded by iter_count restarts from its first BD: no hardware repeat
    chained = attrs.evolve(
        design, fifos=(design.fifos[0], attrs.evolve(design.fifos[1], iter_count=2))
    )
    assert _channels(usage(chained)[Tile(0, 1)], MM2S) == [(0, "out", 4)]


def _big_forward(device, elements: int, depth: int = 1) -> Design:
    n = elements * depth
    return Design(
        "big",
        device,
        (Tensor("x", n, "i32", IN), Tensor("y", n, "i32", OUT)),
        (
            ObjectFifo("in", elements, "i32", shim(), (memtile("fwd"),), depth=depth),
            ObjectFifo("out", elements, "i32", memtile("fwd"), (shim(),), depth=depth),
        ),
        (),
        (Fill("in", "x"), Drain("out", "y")),
        links=(forward("fwd", "in", "out", tile=Tile(1, 1)),),
    )


def test_a_memtile_pool_spills_to_its_emptier_neighbour(npu1):
    half = npu1.memtile_bytes // 2 // 4  # i32 objects of half a memtile
    used = usage(_big_forward(npu1, half, depth=3))
    assert [str(i) for i in used[Tile(1, 1)].memory] == [f"fifo in 2 x {4 * half} B"]
    assert [str(i) for i in used[Tile(0, 1)].memory] == [
        f"fifo in 1 x {4 * half} B (spilled from (1, 1))"
    ]
    assert used[Tile(1, 1)].memory_bytes == npu1.memtile_bytes
    assert Tile(2, 1) not in used  # the other neighbour takes nothing
    # the channels and locks stay home
    assert used[Tile(0, 1)].channels == () and used[Tile(0, 1)].locks == ()
    assert used[Tile(1, 1)].lock_count == 2


def test_the_channels_of_a_spilled_pool_are_numbered_first(npu1):
    half = npu1.memtile_bytes // 2 // 4
    big = _big_forward(npu1, half - 16, depth=3)  # its third object spills; a's pool fits home
    small = [
        ObjectFifo("a_in", 8, "i32", shim(), (memtile("a"),)),
        ObjectFifo("a_out", 8, "i32", memtile("a"), (shim(),)),
    ]
    design = attrs.evolve(
        big,
        fifos=(*small, *big.fifos),
        links=(forward("a", "a_in", "a_out", tile=Tile(1, 1)), *big.links),
    )
    used = usage(design)
    assert [i.name for i in used[Tile(1, 1)].memory] == ["in", "a_in"]
    assert [i.name for i in used[Tile(0, 1)].memory] == ["in"]
    used = used[Tile(1, 1)]
    assert _channels(used, S2MM) == [(0, "in", 3), (1, "a_in", 2)]
    assert _channels(used, MM2S) == [(0, "out", 3), (1, "a_out", 2)]


def test_a_memtile_pool_stays_home_when_no_neighbour_has_room():
    narrow = Device.from_name("npu1", columns=1)
    half = narrow.memtile_bytes // 2 // 4
    design = _big_forward(narrow, half, depth=3)
    design = attrs.evolve(design, links=(forward("fwd", "in", "out"),))
    used = usage(design)
    assert list(used) == [Tile(0, 0), Tile(0, 1)]
    assert used[Tile(0, 1)].memory_bytes == 3 * narrow.memtile_bytes // 2


def test_shim_tasks_stay_live_until_their_group_finishes(npu1):
    design = passthrough(npu1, n=4096, tile=1024)
    quarter = [TAP.linear(1024, offset=1024 * i) for i in range(4)]
    sequence = (
        *(Fill("in", "x", tap, group="a") for tap in quarter[:2]),
        Drain("out", "y", quarter[0], group="b"),
        Finish("a"),
        *(Fill("in", "x", tap, group="a") for tap in quarter[2:]),
        Drain("out", "y", quarter[1], group="b"),
    )
    tasks = lower(attrs.evolve(design, sequence=sequence)).runtime.tasks
    # BD ids taken lowest first and given back when the group finishes; the
    # queue of each channel holds a task until it is shown done, which a
    # group that waited for nothing does not show
    assert [(t.index, t.bd_id, t.live, t.queued) for t in tasks] == [
        (0, 0, 1, 1), (1, 1, 2, 2), (2, 2, 3, 1), (4, 0, 2, 3), (5, 1, 3, 4), (6, 3, 4, 2),
    ]  # fmt: skip
    assert tasks[0].subject == "transfer 0 (fill in from x)"
    assert tasks[2].subject == "transfer 2 (drain out to y)"
    used = usage(attrs.evolve(design, sequence=sequence))[Tile(0, 0)]
    assert used.bds == 4
    assert _channels(used, MM2S) == [(0, "in", 4)] and _channels(used, S2MM) == [(0, "out", 2)]
    assert {c.words for c in used.channels} == {1024}


def test_a_join_of_core_lanes_counts_each_lane_once(npu2):
    lanes = 3
    fifos = [ObjectFifo(f"l{i}", 16, "i32", core(f"w{i}"), (memtile("g"),)) for i in range(lanes)]
    fifos.append(ObjectFifo("all", 16 * lanes, "i32", memtile("g"), (shim(),)))
    design = Design(
        "gather",
        npu2,
        (Tensor("y", 16 * lanes, "i32", OUT),),
        tuple(fifos),
        tuple(Worker(f"w{i}", (Acquire(f"l{i}"), Release(f"l{i}"))) for i in range(lanes)),
        (Drain("all", "y"),),
        links=(join("g", [f"l{i}" for i in range(lanes)], "all", [16 * i for i in range(lanes)]),),
    )
    mem = usage(design)[Tile(0, 1)]
    assert [str(i) for i in mem.memory] == [f"fifo all 2 x {4 * 16 * lanes} B"]
    assert mem.lock_count == 2 * lanes
    assert mem.bds == 2 * lanes + lanes * 2
