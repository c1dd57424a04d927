"""The memtile pool, the slab cut and the per-shape runtime sequence of the
design, against the numbers and patterns worked out by hand (every limit
from the Device)."""

import attrs
import pytest

from iron.core import Device, OperatorError
from iron.design import TAP, Drain, Fill, PoolTask, SetLock, SlotBd, design_of
from iron.ops.flm.gemm import FLMGemm
from iron.ops.flm.packing import BFormat
from iron.ops.flm.schedule import Push, memtile_pool, pushes

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def test_pool_sizes():
    # npu2, bfp16, tile_n 64: A 2*64*512*2 = 131072, C 2*64*64*4*2 = 65536,
    # slot 512*64*9/8 = 36864: (524288 - 196608) // 36864 = 8 (capped at 8)
    pool = memtile_pool(NPU2, 64, BFormat.BFP16)
    assert (pool.slots, pool.slot_bytes, pool.a_bytes, pool.c_bytes) == (8, 36864, 131072, 65536)
    # tile_n 128: C 131072, slot 73728: 262144 // 73728 = 3
    assert memtile_pool(NPU2, 128, BFormat.BFP16).slots == 3
    # npu1, bf16, tile_n 64: slot 65536, 327680 // 65536 = 5, to the byte
    pool = memtile_pool(NPU1, 64, BFormat.BF16)
    assert pool.slots == 5 and pool.free_bytes == 0
    assert pool.a_bytes + pool.c_bytes + 5 * pool.slot_bytes == NPU1.memtile_bytes
    assert FLMGemm(M=256, K=1024, N=512, b_format="bf16").pool(NPU1) == pool


def test_pool_follows_the_device():
    small = attrs.evolve(NPU2, memtile_bytes=256 * 1024)  # 65536 left: one slot
    assert memtile_pool(small, 64, BFormat.BFP16).slots == 1
    tiny = attrs.evolve(NPU2, memtile_bytes=200 * 1024)
    assert memtile_pool(tiny, 64, BFormat.BFP16).slots == 0
    with pytest.raises(OperatorError, match="tile_n=64: leaves no room for one 36864-byte B slot"):
        FLMGemm(M=256, K=1024, N=512).resolve(tiny)


def slabs(M, K, N=1024, device=NPU2, **params):
    program = FLMGemm(M=M, K=K, N=N, **params).program(device)
    return [(s.first, s.units, s.resident, s.b_slots, s.b_uses) for s in program.slabs]


def test_slab_cuts():
    # K = 512 on npu2: tile_n 128, 3 slots; 64 units exceed the lock range
    # of 63, so two resident slabs of 32
    assert slabs(16384, 512) == [(0, 32, True, 1, 32), (32, 32, True, 1, 32)]
    assert slabs(16128, 512) == [(0, 63, True, 1, 63)]
    # K = 6144: 12 k-blocks > 8 slots, streamed through the largest slot
    # count dividing units * k_iters (2 * 12 = 24: 8)
    assert slabs(512, 6144) == [(0, 2, False, 8, 1)]
    assert slabs(768, 6144) == [(0, 3, False, 6, 1)]  # 36: 6
    assert slabs(16384, 6144) == [(0, 64, False, 8, 1)]  # 768 / 8 = 96 passes
    # npu1 bf16: 5 slots
    assert slabs(512, 2560, device=NPU1, b_format="bf16") == [(0, 2, True, 5, 2)]
    assert slabs(512, 3072, device=NPU1, b_format="bf16") == [(0, 2, False, 4, 1)]


def test_slab_cuts_follow_the_device_limits():
    locks15 = attrs.evolve(NPU2, max_lock_value=15)  # 63 units: 5 slabs
    assert [s[1] for s in slabs(16128, 512, device=locks15)] == [13, 13, 13, 12, 12]
    # 48 units x 20 k-blocks / 8 slots = 120 passes fit a queue of 4 x 256;
    # a queue of 2 x 32 takes 64, so M is cut in two: 24 x 20 / 8 = 60
    short = attrs.evolve(NPU2, task_queue_depth=2, max_repeat_count=32)
    assert slabs(256 * 48, 10240) == [(0, 48, False, 8, 1)]
    assert slabs(256 * 48, 10240, device=short) == [(0, 24, False, 8, 1), (24, 24, False, 8, 1)]
    program = FLMGemm(M=256 * 48, K=10240, N=1024).program(short)
    assert [s.fill_passes for s in program.slabs] == [60, 60]
    assert pushes(2, 60, short) == [Push(0, 32), Push(0, 28), Push(1, 32), Push(1, 28)]
    # a shim transfer iterates at most 64 times: 65 streamed units take two slabs
    assert [s[1] for s in slabs(256 * 65, 6144, N=512)] == [33, 32]


def test_a_shape_no_slab_fits_is_refused():
    # one unit of 12 k-blocks over 6 slots is 2 passes; a queue of 1 x 1 holds 1
    one = attrs.evolve(NPU2, task_queue_depth=1, max_repeat_count=1)
    with pytest.raises(OperatorError) as refusal:
        FLMGemm(M=256, K=6144, N=1024).resolve(one)
    assert isinstance(refusal.value, ValueError)
    assert "FLMGemm: K=6144: even a one-unit slab needs more passes" in str(refusal.value)
    assert "1 pushes of 1 can queue" in str(refusal.value)


def tasks(design, kind, **fields):
    return [
        s
        for s in design.sequence
        if isinstance(s, kind) and all(getattr(s, k) == v for k, v in fields.items())
    ]


def test_resident_sequence():
    op = FLMGemm(M=512, K=1024, N=1024).resolve(NPU2)  # tile_n 64, 2 units, 2 k-blocks, 2 blocks
    design = design_of(op)
    assert tasks(design, SetLock, link="pool5") == [SetLock("pool5", 0, 2), SetLock("pool5", 1, 2)]
    (fill,) = tasks(design, PoolTask, link="pool5", fill=True)
    (drain,) = tasks(design, PoolTask, link="pool5", fill=False)
    # the fill takes each slot once all 2 units have read it, and one push
    # covers both column blocks: 2 x 1 fill passes, 2 x 2 drain passes
    assert (fill.bds, fill.repeat_count) == ((SlotBd(0, 2, 2), SlotBd(1, 2, 2)), 2)
    assert (drain.bds, drain.repeat_count) == ((SlotBd(0, 1, 1), SlotBd(1, 1, 1)), 4)
    # column 5 works on column blocks 5 and 13, 64 x 1024 / 8 blocks each
    b = [s.tap for s in tasks(design, Fill, fifo="B5_in")]
    assert b == [
        TAP(5 * 8192, (1, 1, 1, 8192), (0, 0, 0, 1)),
        TAP(13 * 8192, (1, 1, 1, 8192), (0, 0, 0, 1)),
    ]
    a = tasks(design, Fill, fifo="A3")
    assert len(a) == 2  # once per block: every column of the row reads it
    assert a[1].tap == TAP(3 * 64 * 1024, (2, 2, 64, 512), (256 * 1024, 512, 1024, 1))
    c = [s.tap for s in tasks(design, Drain, fifo="C5")]
    assert len(c) == 4  # per block, per unit
    # unit 1 of block 13: chunk q of core row r holds rows r*64 + q*8 .. + 8
    assert c[3] == TAP(13 * 64 + 256 * 1024, (8, 4, 8, 64), (8 * 1024, 64 * 1024, 1024, 1))


def test_streamed_sequence():
    design = design_of(FLMGemm(M=512, K=6144, N=1024).resolve(NPU2))
    fill = tasks(design, PoolTask, link="pool0", fill=True)
    assert [t.repeat_count for t in fill] == [6]  # 3 passes per block, both blocks in one push
    assert fill[0].bds == tuple(SlotBd(i, 1, 1) for i in range(8))
    b = tasks(design, Fill, fifo="B0_in")[0].tap
    assert (b.sizes, b.strides) == ((2, 1, 1, 12 * 4096), (0, 0, 0, 1))  # re-read per unit


def test_pushes_split_at_the_repeat_count():
    assert pushes(1, 600, NPU2) == [Push(0, 256), Push(0, 256), Push(0, 88)]
    short = attrs.evolve(NPU2, max_repeat_count=64)  # 48 x 20 / 8 = 120 passes
    design = design_of(FLMGemm(M=256 * 48, K=10240, N=512).resolve(short))
    drains = tasks(design, PoolTask, link="pool0", fill=False)
    assert [t.repeat_count for t in drains] == [64, 56]


def test_trailing_partial_column_group():
    design = design_of(
        FLMGemm(M=256, K=512, N=1536).resolve(NPU2)
    )  # tile_n 128: 12 tiles, 8 columns
    assert [len(tasks(design, Fill, fifo=f"B{c}_in")) for c in range(8)] == [2] * 4 + [1] * 4
    assert all(len(tasks(design, Fill, fifo=f"A{r}")) == 2 for r in range(4))  # every row, twice
    assert [t.repeat_count for t in tasks(design, PoolTask, link="pool6", fill=True)] == [1]
    narrow = design_of(FLMGemm(M=256, K=1024, N=128).resolve(NPU2))  # 2 tiles: 6 columns idle
    assert [len(tasks(narrow, Fill, fifo=f"B{c}_in")) for c in range(8)] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert not tasks(narrow, SetLock, link="pool7") and not tasks(narrow, PoolTask, link="pool7")
