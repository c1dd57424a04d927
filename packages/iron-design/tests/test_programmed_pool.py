"""Programmed pools: memtile slots the runtime arms and drives, so that a
block read once from DDR is sent to the cores as often as a per-call value
says; and forwards whose destination objects divide the source's."""

import attrs
import numpy as np
import pytest
from sim_designs import add_one_body
from test_mlir import V, assert_differs, assert_matches

from iron.core.spec import IN, OUT
from iron.design import (
    TAP,
    Acquire,
    Call,
    DeadlockError,
    Design,
    DesignError,
    Drain,
    Fill,
    Finish,
    LockError,
    Obj,
    ObjectFifo,
    PoolTask,
    Release,
    SetLock,
    SlotBd,
    Tensor,
    Tile,
    Worker,
    check,
    core,
    forward,
    memtile,
    shim,
    simulate,
    to_mlir,
    usage,
)

SLOT = 256  # elements of one slot
SLOTS = 2


def replay(device, uses=3, *, fill=None, drain=None, arm=None, slots=SLOTS, tile=SLOT):
    """x (2 slots) is read once into the pool, then sent `uses` times to a
    core that adds one: y is x + 1, `uses` times over."""
    n = SLOTS * SLOT
    fill = fill or PoolTask("pool", True, [SlotBd(i, uses, uses) for i in range(SLOTS)])
    drain = drain or PoolTask("pool", False, [SlotBd(i) for i in range(SLOTS)], repeat_count=uses)
    arm = arm if arm is not None else [SetLock("pool", i, uses) for i in range(SLOTS)]
    return Design(
        "replay",
        device,
        tensors=(Tensor("x", n, "i32", IN), Tensor("y", n * uses, "i32", OUT)),
        fifos=(
            ObjectFifo("slots", SLOT, "i32", shim(), (memtile("pool", depth=slots),)),
            ObjectFifo("in", tile, "i32", memtile("pool"), (core("adder"),)),
            ObjectFifo("out", tile, "i32", core("adder"), (shim(),)),
        ),
        workers=(Worker("adder", add_one_body(tile)),),
        links=(forward("pool", "slots", "in", programmed=True),),
        sequence=(
            *arm,
            fill,
            drain,
            Fill("slots", "x", TAP.linear(n)),
            Drain("out", "y", TAP.linear(n * uses)),
            Finish(),
        ),
    )


X = np.arange(SLOTS * SLOT, dtype=np.int32) * 7


def test_a_resident_pool_reads_ddr_once_and_replays(npu2):
    run = simulate(replay(npu2), {"x": X})
    assert np.array_equal(run["y"], np.tile(X + 1, 3))
    assert run.traffic.tensors["x"].read == X.nbytes  # once, not once per use
    assert run.traffic.tensors["y"].written == 3 * X.nbytes


def test_smaller_destination_objects_take_each_slot_in_pieces(npu2):
    run = simulate(replay(npu2, tile=SLOT // 4), {"x": X})
    assert np.array_equal(run["y"], np.tile(X + 1, 3))


def test_the_pool_fits_and_takes_a_lock_pair_per_slot(npu2):
    design = replay(npu2)
    assert check(design).ok
    used = usage(design)
    memtile_use = used[Tile(0, 1)]
    assert memtile_use.lock_count == 2 * SLOTS
    assert [c.bds for c in memtile_use.channels] == [SLOTS, SLOTS]  # the chains pushed
    assert memtile_use.memory_bytes == SLOTS * SLOT * 4
    # one numbering: the channels the emitter names are the ones counted, and
    # an odd channel's runtime BDs are counted in the odd bank
    top = npu2.memtile_dma_channels - 1
    assert [(c.direction, c.index) for c in memtile_use.channels] == [("MM2S", top), ("S2MM", top)]
    assert memtile_use.banks == (0, 2 * SLOTS)
    shim_channels = {(c.direction, c.index, c.fifo) for c in used[Tile(0, 0)].channels}
    assert shim_channels == {("MM2S", npu2.shim_dma_channels - 1, "slots"), ("S2MM", 0, "out")}
    core_channels = {(c.direction, c.index, c.fifo) for c in used[Tile(0, 2)].channels}
    assert core_channels == {("S2MM", npu2.core_dma_channels - 1, "in"), ("MM2S", 0, "out")}


def test_check_names_each_broken_pool_limit(npu2):
    too_many = [SlotBd(0, 64, 64), SlotBd(1, 64, 64)]
    design = replay(
        npu2,
        fill=PoolTask("pool", True, too_many),
        drain=PoolTask("pool", False, [SlotBd(0), SlotBd(1)], repeat_count=257),
        arm=[SetLock("pool", 0, 64), SetLock("pool", 1, 3)],
    )
    text = str(check(design))
    assert "pool task 2 (fill of link pool): slot 0 acquire 64 outside 1..63" in text
    assert "pool task 2 (fill of link pool): slot 1 release 64 outside 1..63" in text
    assert "pool task 3 (drain of link pool): repeat_count 257 outside 1..256" in text
    assert "set_lock 0 (link pool): slot 0 value 64 outside 0..63" in text


def test_check_counts_pushes_queued_per_channel(npu2):
    design = replay(npu2)
    drains = [PoolTask("pool", False, [SlotBd(0), SlotBd(1)])] * 5
    queued = attrs.evolve(design, sequence=(*design.sequence[:3], *drains, *design.sequence[4:]))
    assert "tasks queued on the channel 5 > 4" in str(check(queued))


def test_an_acquire_the_arm_cannot_satisfy_is_a_named_deadlock(npu2):
    design = replay(npu2, arm=[SetLock("pool", 0, 3), SetLock("pool", 1, 2)])
    with pytest.raises(DeadlockError) as error:
        simulate(design, {"x": X})
    assert (
        "sequence[2] fill of link pool (memtile pool (0, 1) S2MM of fifo slots): its BD on "
        "slot 1 waits on the producer slot 1 lock of fifo slots at memtile pool (0, 1) for 3 "
        "(it has 2)"
    ) in str(error.value)


def test_a_release_above_the_lock_maximum_is_an_error(npu2):
    fill = PoolTask("pool", True, [SlotBd(0, 3, 64), SlotBd(1, 3, 3)])
    with pytest.raises(LockError, match=r"slot 0 raises the consumer slot 0 lock .* to 64, above"):
        simulate(replay(npu2, fill=fill), {"x": X})


def test_pool_statements_are_checked_for_structure(npu2):
    with pytest.raises(DesignError, match=r"link pool has slots 0\.\.1, not slot 2"):
        replay(npu2, arm=[SetLock("pool", 2, 1)])
    with pytest.raises(DesignError, match="'elsewhere' is not a programmed link"):
        replay(npu2, arm=[SetLock("elsewhere", 0, 1)])
    with pytest.raises(DesignError, match="100 does not divide 256"):
        replay(npu2, tile=100)


def test_a_forward_sends_each_source_object_whole_in_smaller_objects(npu2):
    """16 x 16 objects, transposed by the memtile, reach the core as four
    64-element objects; the reorder spans the source object."""
    n = 4 * 256
    design = Design(
        "transpose_in_pieces",
        npu2,
        tensors=(Tensor("x", n, "i32", IN), Tensor("y", n, "i32", OUT)),
        fifos=(
            ObjectFifo("tiles", 256, "i32", shim(), (memtile("mem"),)),
            ObjectFifo(
                "in",
                64,
                "i32",
                memtile("mem"),
                (core("adder"),),
                dims_to_stream=((16, 1), (16, 16)),
            ),
            ObjectFifo("out", 64, "i32", core("adder"), (shim(),)),
        ),
        workers=(Worker("adder", add_one_body(64)),),
        links=(forward("mem", "tiles", "in"),),
        sequence=(Fill("tiles", "x", TAP.linear(n)), Drain("out", "y", TAP.linear(n))),
    )
    assert check(design).ok
    memtile_use = next(u for u in usage(design).values() if u.kind == "memtile")
    assert {c.words for c in memtile_use.channels} == {256}  # both move whole 16 x 16 objects
    x = np.arange(n, dtype=np.int32)
    expected = x.reshape(4, 16, 16).transpose(0, 2, 1).reshape(-1) + 1
    assert np.array_equal(simulate(design, {"x": x})["y"], expected)


# ---- MLIR ----------------------------------------------------------------------------------
# written from mlir-aie's dialect: aie.buffer / aie.lock (AIEOps.td), aie.flow,
# aie.shim_dma_allocation, aie.mem with aie.dma_start / aie.dma_bd / aie.next_bd,
# aiex.set_lock and aiex.dma_configure_task with its repeat_count (AIEX.td)


def slot(n: int) -> str:
    return f"""
CHECK:      %[[SLOT{n}:{V}]] = aie.buffer(%[[MEM]]) {{sym_name = "pool_slot{n}"}} : memref<256xi32>
CHECK-NEXT: %[[PROD{n}:{V}]] = aie.lock(%[[MEM]]) {{init = 0 : i32, sym_name = "pool_prod{n}"}}
CHECK-NEXT: %[[CONS{n}:{V}]] = aie.lock(%[[MEM]]) {{init = 0 : i32, sym_name = "pool_cons{n}"}}"""


def slot_bd(take: str, give: str, n: int, value: str, last: bool) -> str:
    end = (
        "CHECK-NEXT: aie.end"
        if last
        else "CHECK-NEXT: aie.next_bd ^[[NEXT:[a-z0-9]+]]\nCHECK-NEXT: ^[[NEXT]]:"
    )
    return f"""
CHECK-NEXT: aie.use_lock(%[[{take}{n}]], AcquireGreaterEqual, %[[{value}]])
CHECK-NEXT: aie.dma_bd(%[[SLOT{n}]] : memref<256xi32> offset = 0 len = 256)
CHECK-NEXT: aie.use_lock(%[[{give}{n}]], Release, %[[{value}]])
{end}"""


REPLAY = f"""
CHECK-DAG:  %[[SHIM:{V}]] = aie.tile(0, 0)
CHECK-DAG:  %[[MEM:{V}]] = aie.tile(0, 1)
CHECK-DAG:  %[[CORE:{V}]] = aie.tile(0, 2)
CHECK:      aie.objectfifo @out(%[[CORE]], {{%[[SHIM]]}}, 2 : i32) : !aie.objectfifo<memref<256xi32>>
{slot(0)}
{slot(1)}
CHECK-NEXT: aie.flow(%[[SHIM]], DMA : [[SHIM_CH:[0-9]]], %[[MEM]], DMA : [[MEM_IN:[0-9]]])
CHECK-NEXT: aie.shim_dma_allocation @slots(%[[SHIM]], MM2S, [[SHIM_CH]])
CHECK-NEXT: aie.flow(%[[MEM]], DMA : [[MEM_OUT:[0-9]]], %[[CORE]], DMA : [[CORE_IN:[0-9]]])
CHECK-NEXT: %[[BUF0:{V}]] = aie.buffer(%[[CORE]]) {{sym_name = "in_adder_buff_0"}} : memref<256xi32>
CHECK-NEXT: %[[BUF1:{V}]] = aie.buffer(%[[CORE]]) {{sym_name = "in_adder_buff_1"}} : memref<256xi32>
CHECK-NEXT: %[[FREE:{V}]] = aie.lock(%[[CORE]]) {{init = 2 : i32, sym_name = "in_adder_prod"}}
CHECK-NEXT: %[[FULL:{V}]] = aie.lock(%[[CORE]]) {{init = 0 : i32, sym_name = "in_adder_cons"}}
CHECK-NEXT: %[[NEXT_OBJ:{V}]] = aie.buffer(%[[CORE]]) {{sym_name = "in_adder_next"}} : memref<1xi32>
CHECK-NEXT: %{{{{{V}}}}} = aie.mem(%[[CORE]]) {{
CHECK-NEXT: %[[ONE:{V}]] = arith.constant 1 : i32
CHECK-NEXT: %{{{{{V}}}}} = aie.dma_start(S2MM, [[CORE_IN]], ^[[BD0:[a-z0-9]+]], ^[[END:[a-z0-9]+]])
CHECK-NEXT: ^[[BD0]]:
CHECK-NEXT: aie.use_lock(%[[FREE]], AcquireGreaterEqual, %[[ONE]])
CHECK-NEXT: aie.dma_bd(%[[BUF0]] : memref<256xi32> offset = 0 len = 256)
CHECK-NEXT: aie.use_lock(%[[FULL]], Release, %[[ONE]])
CHECK-NEXT: aie.next_bd ^[[BD1:[a-z0-9]+]]
CHECK-NEXT: ^[[BD1]]:
CHECK-NEXT: aie.use_lock(%[[FREE]], AcquireGreaterEqual, %[[ONE]])
CHECK-NEXT: aie.dma_bd(%[[BUF1]] : memref<256xi32> offset = 0 len = 256)
CHECK-NEXT: aie.use_lock(%[[FULL]], Release, %[[ONE]])
CHECK-NEXT: aie.next_bd ^[[BD0]]
CHECK-NEXT: ^[[END]]:
CHECK-NEXT: aie.end
CHECK:      aie.core(%[[CORE]]) {{
CHECK:      memref.store %{{{{{V}}}}}, %[[NEXT_OBJ]][%{{{{{V}}}}}] : memref<1xi32>
CHECK-NEXT: scf.for
CHECK-NEXT: aie.use_lock(%[[FULL]], AcquireGreaterEqual, %{{{{{V}}}}})
CHECK:      %[[AT:{V}]] = memref.load %[[NEXT_OBJ]]
CHECK:      %[[OBJ:{V}]] = scf.index_switch %{{{{{V}}}}} -> memref<256xi32>
CHECK-NEXT: case 0 {{
CHECK-NEXT: scf.yield %[[BUF0]] : memref<256xi32>
CHECK:      case 1 {{
CHECK-NEXT: scf.yield %[[BUF1]] : memref<256xi32>
CHECK:      func.call @add_one_i32(%[[OBJ]], %{{{{{V}}}}}, %{{{{{V}}}}})
CHECK-NEXT: aie.use_lock(%[[FREE]], Release, %{{{{{V}}}}})
CHECK:      aie.runtime_sequence @sequence(%[[X:{V}]]: memref<512xi32>, %[[Y:{V}]]: memref<1536xi32>) {{
CHECK-NEXT: aiex.npu.load_pdi {{device_ref = @main}}
CHECK-NEXT: aiex.set_lock(%[[PROD0]], 3)
CHECK-NEXT: aiex.set_lock(%[[PROD1]], 3)
CHECK-NEXT: %[[FILL:{V}]] = aiex.dma_configure_task(%[[MEM]], S2MM, [[MEM_IN]]) {{
CHECK-NEXT: %[[THREE:{V}]] = arith.constant 3 : i32
{slot_bd("PROD", "CONS", 0, "THREE", False)}
{slot_bd("PROD", "CONS", 1, "THREE", True)}
CHECK-NEXT: {{{{^ *}}$}}}}
CHECK-NEXT: aiex.dma_start_task(%[[FILL]])
CHECK-NEXT: %[[DRAIN:{V}]] = aiex.dma_configure_task(%[[MEM]], MM2S, [[MEM_OUT]]) {{
CHECK-NEXT: %[[UNIT:{V}]] = arith.constant 1 : i32
{slot_bd("CONS", "PROD", 0, "UNIT", False)}
{slot_bd("CONS", "PROD", 1, "UNIT", True)}
CHECK-NEXT: }} {{repeat_count = 2 : i32}}
CHECK-NEXT: aiex.dma_start_task(%[[DRAIN]])
CHECK-NEXT: %[[READ:{V}]] = aiex.dma_configure_task_for @slots {{
CHECK-NEXT: aie.dma_bd(%[[X]] : memref<512xi32> offset = 0 len = 512 sizes = [1, 1, 1, 512] strides = [0, 0, 0, 1])
CHECK:      %[[WRITE:{V}]] = aiex.dma_configure_task_for @out {{
CHECK:      aiex.dma_await_task(%[[WRITE]])
CHECK-NEXT: aiex.dma_free_task(%[[FILL]])
CHECK-NEXT: aiex.dma_free_task(%[[DRAIN]])
CHECK-NEXT: aiex.dma_free_task(%[[READ]])
CHECK-NEXT: aiex.dma_free_task(%[[WRITE]])
"""


def test_a_programmed_pool_emits_slots_locks_routes_and_runtime_tasks(npu2, tmp_path):
    text = to_mlir(replay(npu2))
    assert_matches(text, REPLAY, tmp_path)
    # the pool's legs are no object fifos, nor is the pool a link the lowering would run
    assert "aie.objectfifo @slots" not in text and "aie.objectfifo @in(" not in text
    assert "aie.objectfifo.link" not in text


@pytest.mark.parametrize(
    "change",
    [
        {"arm": [SetLock("pool", 0, 2), SetLock("pool", 1, 3)]},
        {"fill": PoolTask("pool", True, [SlotBd(0, 3, 3), SlotBd(1, 3, 2)])},
        {"fill": PoolTask("pool", True, [SlotBd(0, 2, 3), SlotBd(1, 3, 3)])},
        {"drain": PoolTask("pool", False, [SlotBd(0), SlotBd(1)], repeat_count=4)},
        {"fill": PoolTask("pool", True, [SlotBd(0, 3, 3), SlotBd(1, 3, 3)], repeat_count=2)},
        {"drain": PoolTask("pool", False, [SlotBd(1), SlotBd(0)], repeat_count=3)},
        {"slots": 3},
    ],
)
def test_the_pool_checks_fail_on_another_lock_value_repeat_count_or_order(change, npu2, tmp_path):
    assert_differs(to_mlir(replay(npu2, **change)), REPLAY, tmp_path)


def test_a_pool_the_dialect_cannot_drive_is_refused_by_name(npu2):
    design = replay(npu2)
    elsewhere = attrs.evolve(design.fifos[1], consumers=(core("adder"), shim()))
    with pytest.raises(
        DesignError,
        match=r"link pool: a programmed pool streams to cores, whole objects; not to runtime",
    ):
        to_mlir(attrs.evolve(design, fifos=(design.fifos[0], elsewhere, design.fifos[2])))
    body = (Acquire("in", 2), *design.workers[0].body)  # takes two, gives one back per pass
    drifting = attrs.evolve(design, workers=(attrs.evolve(design.workers[0], body=body),))
    (v,) = [v for v in check(drifting).violations if v.rule.startswith("objects held")]
    assert (v.subject, v.rule, v.found) == ("fifo in", "objects held at an acquire", "0..1")


def two_pools(device):
    """Two programmed pools on one memtile, both feeding one worker."""
    kernel = add_one_body(SLOT)[2].kernel
    body = (
        Acquire("a"),
        Acquire("b"),
        Acquire("out"),
        Call(kernel, (Obj("a"), Obj("out"), SLOT)),
        Release("a"),
        Release("b"),
        Release("out"),
    )
    return Design(
        "two_pools",
        device,
        tensors=(Tensor("x", SLOT, "i32", IN), Tensor("y", SLOT, "i32", OUT)),
        fifos=(
            ObjectFifo("a_slots", SLOT, "i32", shim(0), (memtile("pool_a", depth=1),)),
            ObjectFifo("a", SLOT, "i32", memtile("pool_a"), (core("w"),)),
            ObjectFifo("b_slots", SLOT, "i32", shim(0), (memtile("pool_b", depth=1),)),
            ObjectFifo("b", SLOT, "i32", memtile("pool_b"), (core("w"),)),
            ObjectFifo("out", SLOT, "i32", core("w"), (shim(),)),
        ),
        workers=(Worker("w", body, tile=Tile(0, 2)),),
        links=(
            forward("pool_a", "a_slots", "a", tile=Tile(0, 1), programmed=True),
            forward("pool_b", "b_slots", "b", tile=Tile(0, 1), programmed=True),
        ),
        sequence=(Fill("a_slots", "x"), Drain("out", "y")),
    )


def test_two_pools_on_one_memtile_take_its_highest_channels_in_turn(npu2, tmp_path):
    """The ObjectFifo lowering takes each tile's lowest free channels, so the
    channels the runtime drives count down from the last."""
    design = two_pools(npu2)
    checks = f"""
CHECK-DAG: %[[SHIM:{V}]] = aie.tile(0, 0)
CHECK-DAG: %[[MEM:{V}]] = aie.tile(0, 1)
CHECK-DAG: %[[CORE:{V}]] = aie.tile(0, 2)
CHECK:     aie.flow(%[[SHIM]], DMA : 1, %[[MEM]], DMA : 5)
CHECK:     aie.shim_dma_allocation @a_slots(%[[SHIM]], MM2S, 1)
CHECK:     aie.flow(%[[MEM]], DMA : 5, %[[CORE]], DMA : 1)
CHECK:     aie.flow(%[[SHIM]], DMA : 0, %[[MEM]], DMA : 4)
CHECK:     aie.shim_dma_allocation @b_slots(%[[SHIM]], MM2S, 0)
CHECK:     aie.flow(%[[MEM]], DMA : 4, %[[CORE]], DMA : 0)
"""
    assert_matches(to_mlir(design), checks, tmp_path)
