"""The memtile pool, the slab cut and the per-shape program, against the
numbers and patterns worked out from IRON's design (every limit from the
Device)."""

import attrs
import numpy as np
import pytest

from iron.core import Device, OperatorError
from iron.ops.flm.gemm import FLMGemm
from iron.ops.flm.packing import BFormat
from iron.ops.flm.schedule import LockOp, Push, memtile_pool

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def bits(value):
    return int(np.float32(value).view(np.int32))


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
    assert FLMGemm(256, 1024, 512, b_format="bf16").pool(NPU1) == pool


def test_pool_follows_the_device():
    small = attrs.evolve(NPU2, memtile_bytes=256 * 1024)  # 65536 left: one slot
    assert memtile_pool(small, 64, BFormat.BFP16).slots == 1
    tiny = attrs.evolve(NPU2, memtile_bytes=200 * 1024)
    assert memtile_pool(tiny, 64, BFormat.BFP16).slots == 0
    with pytest.raises(OperatorError, match="tile_n=64: leaves no room for one 36864-byte B slot"):
        FLMGemm(256, 1024, 512).resolve(tiny)


def slabs(M, K, N=1024, device=NPU2, **params):
    program = FLMGemm(M, K, N, **params).program(device)
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
    program = FLMGemm(256 * 48, 10240, 1024).program(short)
    assert [s.fill_passes for s in program.slabs] == [60, 60]
    assert program.slabs[0].columns[0].fill.pushes == (
        Push(0, 32),
        Push(0, 28),
        Push(1, 32),
        Push(1, 28),
    )


def test_a_shape_no_slab_fits_is_refused():
    # one unit of 12 k-blocks over 6 slots is 2 passes; a queue of 1 x 1 holds 1
    one = attrs.evolve(NPU2, task_queue_depth=1, max_repeat_count=1)
    with pytest.raises(OperatorError) as refusal:
        FLMGemm(256, 6144, 1024).resolve(one)
    assert isinstance(refusal.value, ValueError)
    assert "FLMGemm: K=6144: even a one-unit slab needs more passes" in str(refusal.value)
    assert "1 pushes of 1 can queue" in str(refusal.value)


def test_resident_program_patterns():
    program = FLMGemm(512, 1024, 1024).program(NPU2)  # tile_n 64, 2 units, 2 k-blocks
    (slab,) = program.slabs
    assert (program.k_iters, program.units, slab.fill_passes, slab.drain_passes) == (2, 2, 1, 2)
    assert slab.rtp == (1024, 2, 2, 0, bits(-np.inf), bits(np.inf))
    assert len(slab.a) == 4 and all(len(row) == 2 for row in slab.a)  # 2 column blocks of 8 x 64
    a = slab.a[3][1]
    assert (a.offset, a.sizes, a.strides) == (
        3 * 64 * 1024,
        (2, 2, 1, 64, 512),
        (256 * 1024, 512, 256 * 1024, 1024, 1),
    )
    column = slab.columns[5]
    assert column.blocks == (5, 13)
    b = column.b[1]  # column block 13 starts at 13 * 64 * 1024 / 8 blocks
    assert (b.offset, b.sizes, b.strides) == (13 * 8192, (1, 2, 1, 4096), (0, 4096, 0, 1))
    c = column.c[1]
    assert (c.offset, c.sizes, c.strides) == (13 * 64, (1, 2, 256, 64), (0, 256 * 1024, 1024, 1))
    assert column.arm == (LockOp("prod", 0, 2), LockOp("prod", 1, 2))
    fill, drain = column.fill.bds, column.drain.bds
    assert [(bd.slot, bd.offset, bd.size) for bd in fill] == [(0, 0, 4096), (1, 4096, 4096)]
    assert (fill[1].acquire, fill[1].release) == (LockOp("prod", 1, 2), LockOp("cons", 1, 2))
    assert (drain[0].acquire, drain[0].release) == (LockOp("cons", 0, 1), LockOp("prod", 0, 1))
    # a push covers every block its passes fit: 2 x 1 fill, 2 x 2 drain passes
    assert column.fill.pushes == (Push(0, 2),) and column.drain.pushes == (Push(0, 4),)


def test_streamed_program_patterns():
    (slab,) = FLMGemm(512, 6144, 1024, epilogue="silu", clamp=(-2, 2)).program(NPU2).slabs
    assert slab.rtp == (1024, 2, 12, 2, bits(-2), bits(2))
    column = slab.columns[0]
    assert column.b[0].sizes == (2, 12, 1, 4096)  # the unit dimension re-reads B (stride 0)
    assert column.fill.bds[7].acquire == LockOp("prod", 7, 1)
    assert column.fill.pushes == (Push(0, 6),)  # 3 passes per block, both blocks in one push


def test_pushes_split_at_the_repeat_count():
    (slab,) = FLMGemm(256 * 240, 10240, 512).program(NPU2).slabs  # 240 x 20 / 8 = 600 passes
    pushes = slab.columns[0].drain.pushes
    assert [(p.block, p.repeat_count) for p in pushes] == [(0, 256), (0, 256), (0, 88)]


def test_trailing_partial_column_group():
    program = FLMGemm(256, 512, 1536).program(NPU2)  # tile_n 128: 12 tiles over 8 columns
    (slab,) = program.slabs
    assert [c.blocks for c in slab.columns] == [(c, c + 8) for c in range(4)] + [
        (c,) for c in range(4, 8)
    ]
    assert all(len(row) == 2 for row in slab.a)  # A still goes to every row twice
    assert slab.columns[6].fill.pushes == (Push(0, 1),)
    narrow = FLMGemm(256, 1024, 128).program(NPU2)  # 2 tiles: 6 columns idle
    assert [len(c.b) for c in narrow.slabs[0].columns] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert narrow.slabs[0].columns[7].arm == () and narrow.slabs[0].columns[7].fill.pushes == ()
