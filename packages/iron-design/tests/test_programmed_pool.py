"""Programmed pools: memtile slots the runtime arms and drives, so that a
block read once from DDR is sent to the cores as often as a per-call value
says; and forwards whose destination objects divide the source's."""

import attrs
import numpy as np
import pytest
from sim_designs import add_one_body

from iron.core.spec import IN, OUT
from iron.design import (
    TAP,
    DeadlockError,
    Design,
    DesignError,
    Drain,
    Fill,
    Finish,
    LockError,
    ObjectFifo,
    PoolTask,
    SetLock,
    SlotBd,
    Tensor,
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
    memtile_use = next(u for u in usage(design).values() if u.kind == "memtile")
    assert memtile_use.lock_count == 2 * SLOTS
    assert [c.bds for c in memtile_use.channels] == [SLOTS, SLOTS]  # the chains pushed
    assert memtile_use.memory_bytes == SLOTS * SLOT * 4


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
    with pytest.raises(DesignError, match="destination objects divide its source's"):
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


def test_to_mlir_refuses_a_programmed_pool_by_name(npu2):
    with pytest.raises(DesignError, match=r"link pool: programmed pools .* are not emitted yet"):
        to_mlir(replay(npu2))
