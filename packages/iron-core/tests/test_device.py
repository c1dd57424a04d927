import pytest

from iron.core import Device


def test_npu1_numbers_match_the_target_model():
    npu1 = Device.from_name("npu1")
    assert (npu1.arch, npu1.columns, npu1.max_columns, npu1.compute_rows) == ("aie2", 4, 4, 4)
    assert npu1.memtile_bytes == 0x80000 and npu1.core_bytes == 0x10000
    assert (npu1.shim_dma_channels, npu1.bd_ids_per_shim, npu1.task_queue_depth) == (2, 16, 4)
    assert (npu1.max_repeat_count, npu1.max_lock_value, npu1.coherence_granule) == (256, 63, 64)
    assert npu1.shim_dma_limit == 8 and npu1.cores == 16
    assert not npu1.block_float
    assert "Phoenix" in npu1.products


def test_npu2_numbers_match_the_target_model():
    npu2 = Device.from_name("npu2")
    assert (npu2.arch, npu2.columns, npu2.max_columns) == ("aie2p", 8, 8)
    assert npu2.shim_dma_limit == 16 and npu2.cores == 32
    assert npu2.block_float
    assert "Strix" in npu2.products and "Krackan" in npu2.products


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
