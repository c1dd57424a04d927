"""Tunables resolve against a device: the default column count is the
largest that divides the work and fits the device's columns and shim DMA
budget. Tolerances depend on the device's arch. And the buffer descriptor
rules, on hand-worked patterns."""

import pytest

from iron.core import Device, OperatorError, Tolerance
from iron.ops.eltwise import (
    GELU,
    ElementwiseAdd,
    ElementwiseMul,
    MemCopy,
    ReLU,
    Repeat,
    RMSNorm,
    RoPE,
    Softmax,
    Transpose,
)
from iron.ops.eltwise.common import bd_problem

DEVICES = [Device.from_name("npu1", columns=c) for c in range(1, 5)] + [
    Device.from_name("npu2", columns=c) for c in range(1, 9)
]


def expected_columns(device, units, streams_per_column, shared=0):
    """By hand: the most columns c <= device.columns with units % c == 0
    whose streams fit the 2-per-column shim budget."""
    budget = 2 * device.columns - shared
    fitting = [c for c in range(1, device.columns + 1) if c * streams_per_column <= budget]
    return max(c for c in fitting if units % c == 0)


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d.key)
@pytest.mark.parametrize("size", [256, 768, 1024, 2048, 5120, 8192, 12288])
def test_elementwise_columns_are_the_most_that_divide_the_lines_and_fit(device, size):
    lines = size // 256
    for op, streams in [(ReLU(size=size), 1), (ElementwiseAdd(size=size), 2)]:
        resolved = op.resolve(device)
        assert (resolved.tile_size, resolved.num_channels) == (256, 1)
        assert resolved.num_aie_columns == expected_columns(device, lines, streams)


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d.key)
def test_two_channels_halve_what_the_shim_allows_binary_operators(device):
    op = ElementwiseMul(size=2**16, num_channels=2)
    if device.columns == 1:  # 2 cores x 2 inputs: more streams than one shim tile has
        with pytest.raises(OperatorError, match="num_channels=2: 4 shim DMA streams"):
            op.resolve(device)
        return
    resolved = op.resolve(device)
    assert resolved.num_aie_columns == expected_columns(device, 2**16 // 256 // 2, 4)
    assert resolved.num_aie_columns <= max(1, device.columns // 2)


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d.key)
def test_a_shared_weight_stream_costs_the_budget(device):
    rows = 24
    plain = RMSNorm(size=rows * 512, tile_size=512, num_channels=2).resolve(device)
    assert plain.num_aie_columns == expected_columns(device, rows // 2, 2)
    weighted = RMSNorm(size=rows * 512, tile_size=512, num_channels=2, weighted=True)
    if device.columns == 1:  # 2 cores and the weight: 3 streams, one shim tile has 2
        with pytest.raises(OperatorError, match="num_channels=2: 4 shim DMA streams"):
            weighted.resolve(device)
        return
    weighted = weighted.resolve(device)
    assert weighted.num_aie_columns == expected_columns(device, rows // 2, 2, shared=2)


def test_row_and_tile_work_units():
    npu2 = Device.from_name("npu2")
    assert Softmax(rows=12, cols=64).resolve(npu2).num_aie_columns == 6
    assert RoPE(rows=32, cols=64, angle_rows=1).resolve(npu2).num_aie_columns == 1
    assert RoPE(rows=32, cols=64, angle_rows=8).resolve(npu2).num_aie_columns == 8
    # two input streams per core: npu1's 8 streams allow 4 columns, but 6 angle rows split 3 ways
    assert (
        RoPE(rows=12, cols=64, angle_rows=6).resolve(Device.from_name("npu1")).num_aie_columns == 3
    )
    transpose = Transpose(M=256, N=512).resolve(npu2)
    assert (transpose.tile_m, transpose.tile_n, transpose.num_aie_columns) == (128, 64, 8)
    assert MemCopy(size=100).resolve(npu2).tile_size == 100  # a short buffer is one line


def test_given_tunables_are_kept_and_resolution_is_idempotent():
    npu2 = Device.from_name("npu2")
    op = ReLU(size=8192, num_aie_columns=2, tile_size=512)
    resolved = op.resolve(npu2)
    assert (resolved.num_aie_columns, resolved.tile_size, resolved.num_channels) == (2, 512, 1)
    assert resolved.resolve(npu2) is resolved
    assert op.identity() != resolved.identity()  # the device is part of identity


def test_tolerances_per_device_arch():
    npu1, npu2 = Device.from_name("npu1"), Device.from_name("npu2")
    gelu = GELU(size=1024)
    assert gelu.tolerance(npu1).rtol == 0.128  # aie2's lookup tables
    assert gelu.tolerance(npu2).rtol < gelu.tolerance(npu1).rtol
    assert gelu.resolve(npu2).tolerance() == gelu.tolerance(npu2)
    assert gelu.tolerance() == gelu.tolerance(npu1)  # unknown device: the looser bound
    assert ElementwiseAdd(size=64).tolerance(npu1) == Tolerance.relative(2**-8)
    assert Repeat(rows=2, cols=64, repeat=2).tolerance(npu2).is_exact


# ---- one shim buffer descriptor ------------------------------------------------------


@pytest.mark.parametrize(
    "sizes,strides,itemsize",
    [
        ((1 << 20,), (1,), 2),  # contiguous: linear mode, no wrap limit
        ((64, 4, 16), (64, 16, 1), 2),  # nested but contiguous
        ((2, 2046), (4096, 1), 2),  # d0 = 1023 words
        ((2, 1023), (2048, 1), 4),
        ((1023, 2), (8, 1), 2),  # d1 = 1023
        ((64, 1, 2, 2), (0, 0, 8, 1), 2),  # d3 iterates 64 times with stride 0
        ((512,), (3,), 4),  # a strided d0 of 4-byte elements
        ((2, 2), (1 << 21, 1), 2),  # a d1 stride of exactly 2^20 words
    ],
)
def test_patterns_one_descriptor_walks(sizes, strides, itemsize):
    assert bd_problem(sizes, strides, itemsize) is None


@pytest.mark.parametrize(
    "sizes,strides,itemsize,words",
    [
        ((2, 2048), (4096, 1), 2, "d0 (innermost) is 1024 4-byte words"),
        ((2, 1024), (2048, 1), 4, "d0 (innermost) is 1024 4-byte words"),
        ((1024, 2), (8, 1), 2, "d1 (1024) exceeds"),
        ((65, 1, 2, 2), (0, 0, 8, 1), 2, "d3 (outermost, 65)"),
        ((64, 2, 2), (0, 8, 1), 2, "the d2 stride is 0"),
        ((512,), (3,), 2, "with 2-byte elements it must be 1"),
        ((2, 2, 2), (8, 0, 1), 2, "the d1 stride is 0"),
        ((2, 2), (3, 1), 2, "the d1 stride (3 elements) is not a whole number"),
        ((2, 2), ((1 << 21) + 2, 1), 2, "at most 1048576 (20 bits)"),
        ((2, 2, 2, 2, 2), (1, 1, 1, 1, 1), 2, "at most 4"),
        ((5,), (1,), 2, "5 elements of 2 bytes"),
    ],
)
def test_patterns_one_descriptor_refuses(sizes, strides, itemsize, words):
    assert words in bd_problem(sizes, strides, itemsize)


@pytest.mark.parametrize(
    "cols,repeat,split",
    [
        (64, 4, (1, 64)),
        (2048, 4, (2, 1024)),
        (2046, 4, (1, 2046)),  # 1023 words: fits unsplit
        (3000, 2, (2, 1500)),
        (4096, 1, (1, 4096)),  # repeat 1 is a contiguous copy
    ],
)
def test_repeat_splits_a_row_into_the_fewest_legal_runs(cols, repeat, split):
    assert Repeat(rows=4, cols=cols, repeat=repeat).split == split
