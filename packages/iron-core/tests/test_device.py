import pytest

from iron.core import Device

# Every number below is stated in mlir-aie's target model
# (include/aie/Dialect/AIE/IR/AIETargetModel.h and lib/.../AIETargetModel.cpp,
# main as of August 2026) or the AIEX shim-BD verifiers (AIEXDialect.cpp,
# BdLowering.h); the comment on each line names the function that states it.
# The tests also check quantities derived from them, which a transcription
# error in one field would break.


def test_npu1_numbers_match_the_target_model():
    npu1 = Device.from_name("npu1")
    assert npu1.arch == "aie2"  # BaseNPU1TargetModel::getTargetArch
    assert (npu1.columns, npu1.max_columns) == (4, 4)  # VirtualizedNPU1TargetModel(4)
    assert npu1.rows == 6 and npu1.compute_rows == 4  # rows(): shim, memtile, 4 core rows
    assert npu1.memtile_bytes == 0x80000  # getMemTileSize
    assert npu1.core_bytes == 0x10000  # getLocalMemorySize
    assert npu1.core_stack_bytes == 0x400  # getDefaultCoreStackSize
    assert (npu1.shim_dma_channels, npu1.bd_ids_per_shim) == (2, 16)  # shim-mux ports, getNumBDs
    assert npu1.task_queue_depth == 4  # Task_Queue_Size register field
    assert npu1.max_repeat_count == 256  # NpuPushQueueOp::verify: repeat_count 0..255 + 1
    assert npu1.max_lock_value == 0x3F  # getMaxLockValue
    assert npu1.dma_granule == 4  # getAddressGenGranularity: 32 bits
    assert not npu1.block_float  # isSupportedBlockFormat: AIE2P only
    assert "Phoenix" in npu1.products


def test_npu2_numbers_match_the_target_model():
    npu2 = Device.from_name("npu2")
    assert npu2.arch == "aie2p"  # BaseNPU2TargetModel::getTargetArch
    assert (npu2.columns, npu2.max_columns) == (8, 8)  # NPU2TargetModel::columns
    assert npu2.block_float  # isSupportedBlockFormat: v8bfp16ebs8, v16bfp16ebs16
    assert "Strix" in npu2.products and "Krackan" in npu2.products


@pytest.mark.parametrize("name", ["npu1", "npu2"])
def test_derived_quantities_follow_from_the_table(name):
    device = Device.from_name(name)
    assert device.cores == device.columns * 4  # 4 core rows in every column
    assert device.shim_dma_limit == device.columns * 2  # 2 shim-mux channels per column
    # one 512 KiB memtile per column: 2 MiB of L2 on npu1, 4 MiB on npu2
    assert device.columns * device.memtile_bytes == {"npu1": 2, "npu2": 4}[name] * 2**20
    # 64 KiB per core: 1 MiB of L1 on npu1, 2 MiB on npu2
    assert device.cores * device.core_bytes == {"npu1": 1, "npu2": 2}[name] * 2**20
    # 16 shim BDs feed 2 MM2S + 2 S2MM queues of depth 4: "four queues of four"
    assert 2 * 2 * device.task_queue_depth == device.bd_ids_per_shim
    # memtile BDs split evenly between even and odd channels (0-23, 24-47)
    assert device.memtile_bds // 2 == 24


def test_tile_limits_view():
    npu1 = Device.from_name("npu1")
    core, memtile, shim = (npu1.limits(k) for k in ("core", "memtile", "shim"))
    assert (core.memory_bytes, core.banks, memtile.memory_bytes, memtile.banks) == (
        0x10000, 4, 0x80000, 8,
    )  # fmt: skip
    assert (core.locks, memtile.locks, shim.locks) == (16, 64, 16)  # getNumLocks
    assert (core.bds, memtile.bds, shim.bds) == (16, 48, 16)  # getNumBDs
    assert (core.dma_channels, memtile.dma_channels, shim.dma_channels) == (2, 6, 2)
    assert (core.bd_dims, memtile.bd_dims, shim.bd_dims) == (3, 4, 3)  # getBDMaxDims
    assert (core.bd_words, memtile.bd_words) == (2**14 - 1, 2**17 - 1)  # getDmaBdMaxLen
    # wrap fields hold the size: 8 bits -> 255, 10 bits -> 1023 (getDmaBdWrapBits)
    assert (core.max_wrap, memtile.max_wrap, shim.max_wrap) == (255, 1023, 1023)
    # step fields hold stride - 1: 13, 17, 20 bits (getDmaBdStepBits)
    assert (core.max_stride, memtile.max_stride, shim.max_stride) == (2**13, 2**17, 2**20)
    assert npu1.shim_max_iterations == 64  # verifyStridesWraps: Size 3 in [1:64]
    with pytest.raises(ValueError, match=r"unknown tile kind 'dsp'.*shim, memtile, core"):
        npu1.limits("dsp")


def test_tile_kind_by_row():
    npu2 = Device.from_name("npu2")
    assert [npu2.tile_kind(r) for r in range(6)] == ["shim", "memtile"] + ["core"] * 4
    with pytest.raises(ValueError, match=r"npu2 has rows 0..5; row 6 does not exist"):
        npu2.tile_kind(6)


def test_narrow_device_shrinks_its_shim_budget():
    npu2_4 = Device.from_name("npu2", columns=4)
    assert npu2_4.columns == 4 and npu2_4.max_columns == 8 and npu2_4.shim_dma_limit == 8
    assert npu2_4 != Device.from_name("npu2")
    assert npu2_4.key == "npu2:aie2p:4x4"
    assert Device.from_name("npu2", columns=4) == npu2_4


def test_shim_columns_caps_columns_by_stream_budget():
    npu2, npu1 = Device.from_name("npu2"), Device.from_name("npu1")
    assert npu2.shim_columns(streams=1) == 8
    assert npu2.shim_columns(streams=2) == 8  # 16 streams / 2 per column
    assert npu2.shim_columns(streams=2, channels=2) == 4
    assert npu1.shim_columns(streams=2, channels=2) == 2
    assert npu1.shim_columns(streams=3, channels=2) == 1  # never below one column
    assert (
        npu2.shim_columns(streams=1, replicated=4) == 8
    )  # 12 left for 1 stream/column, capped at 8
    assert npu2.shim_columns(streams=2, replicated=4) == 6


def test_unknown_device_lists_valid_choices():
    with pytest.raises(ValueError, match=r"unknown device 'npu3'.*npu1, npu2"):
        Device.from_name("npu3")


@pytest.mark.parametrize("columns", [0, 5, -1, 2.0, True])
def test_bad_column_count_lists_valid_choices(columns):
    with pytest.raises(ValueError, match=r"npu1 has 4 usable columns.*valid choices: 1, 2, 3, 4"):
        Device.from_name("npu1", columns=columns)


def test_device_is_a_frozen_value():
    npu1 = Device.from_name("npu1")
    with pytest.raises(AttributeError):
        npu1.columns = 2
    assert hash(npu1) == hash(Device.from_name("npu1"))


def test_the_shim_budget_names_what_does_not_fit():
    npu1 = Device.from_name("npu1")  # 4 columns x 2 shim channels: 8 streams each way
    assert npu1.shim_budget_problem(4, streams=2) is None  # 8 of 8
    assert npu1.shim_budget_problem(5, streams=1) == "at most the 4 columns of npu1"
    assert npu1.shim_budget_problem(4, streams=2, channels=2) == (
        "16 shim DMA streams ((4 columns x 2 streams) x 2 channels) exceed the 8 of npu1 at 4 columns"
    )
    assert npu1.shim_budget_problem(3, streams=2, replicated=1) is None  # 6 + 1 of 8
    assert npu1.shim_budget_problem(3, streams=2, channels=2, replicated=1) == (
        "14 shim DMA streams ((3 columns x 2 streams + 1 shared) x 2 channels) exceed the 8 "
        "of npu1 at 4 columns"
    )
    narrow = Device.from_name("npu2", columns=2)  # the budget shrinks with the width
    assert narrow.shim_budget_problem(2, streams=2) is None
    assert narrow.shim_budget_problem(2, streams=3) is not None
    # the largest width that fits is what shim_columns picks
    for streams in (1, 2, 3):
        most = npu1.shim_columns(streams)
        assert npu1.shim_budget_problem(most, streams) is None
        assert most == npu1.columns or npu1.shim_budget_problem(most + 1, streams) is not None
