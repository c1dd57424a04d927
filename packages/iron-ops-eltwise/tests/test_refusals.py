"""Every refusal names the operator, the parameter with its value, and the
rule it broke: at construction when the parameters decide it, at `resolve`
when the device does, in the reference for per-call values."""

import re

import numpy as np
import pytest

from iron.core import Device, OperatorError, bf16
from iron.ops.eltwise import (
    Clamp,
    Dequant,
    ElementwiseAdd,
    ReLU,
    Repeat,
    RMSNorm,
    RoPE,
    Softmax,
    StridedCopy,
    Transpose,
)

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


def strided(sizes, strides, dtype="bf16", input_buffer_size=8192, output_buffer_size=8192):
    return dict(input_buffer_size=input_buffer_size, output_buffer_size=output_buffer_size,
                sizes=sizes, strides=strides, dtype=dtype)  # fmt: skip


# (operator, parameters, device to resolve on or None, parameter named, words of the rule)
REFUSALS = [
    # elementwise lines over the array
    (ReLU, {"size": 1000}, NPU2, "size", "a whole number of 256-element lines"),
    (ReLU, {"size": 4096, "num_aie_columns": 3}, NPU2, "size",
     "16 lines of 256 must split evenly over 3 cores"),
    (ReLU, {"size": 8192, "tile_size": 8192}, None, "tile_size", "at most 4096"),
    (ReLU, {"size": 1024, "tile_size": 255}, None, "tile_size", "an even number of elements"),
    (ReLU, {"size": 7}, None, "size", "an even number of elements"),
    (ReLU, {"size": 1024, "num_channels": 3}, None, "num_channels", "1 to 2 cores per column"),
    # tunables past the device's columns or its shim DMA budget
    (ReLU, {"size": 8192, "num_aie_columns": 8}, NPU1, "num_aie_columns",
     "at most the 4 columns of npu1"),
    (ElementwiseAdd, {"size": 8192, "num_aie_columns": 4, "num_channels": 2}, NPU1,
     "num_aie_columns", "16 shim DMA streams ((4 columns x 2 streams) x 2 channels) "
     "exceed the 8 of npu1 at 4 columns"),
    (ElementwiseAdd, {"size": 8192, "num_aie_columns": 8}, Device.from_name("npu2", columns=4),
     "num_aie_columns", "at most the 4 columns of npu2"),
    (ElementwiseAdd, {"size": 8192, "num_channels": 2}, Device.from_name("npu1", columns=1),
     "num_channels", "4 shim DMA streams ((1 columns x 2 streams) x 2 channels) "
     "exceed the 2 of npu1 at 1 columns"),
    (RMSNorm, {"size": 16 * 256, "tile_size": 256, "weighted": True, "num_aie_columns": 4,
               "num_channels": 2}, NPU1, "num_aie_columns", "((4 columns x 1 streams + 1 shared) x 2 channels)"),
    # norms
    (RMSNorm, {"size": 16384, "tile_size": 16384}, None, "tile_size", "at most 8192"),
    (RMSNorm, {"size": 1000, "tile_size": 256}, None, "size", "a whole number of 256-element rows"),
    (RMSNorm, {"size": 1024, "tile_size": 256, "eps": 0.0}, None, "eps", "positive"),
    # RoPE
    (RoPE, {"rows": 32, "cols": 64, "angle_rows": 5}, None, "angle_rows", "must divide rows=32"),
    (RoPE, {"rows": 32, "cols": 48}, None, "cols", "a multiple of 32"),
    (RoPE, {"rows": 32, "cols": 64, "method": "rotate"}, None, "method",
     "one of two_halves, interleaved"),
    (RoPE, {"rows": 32, "cols": 64, "angle_rows": 8, "num_aie_columns": 3}, NPU2, "angle_rows",
     "8 angle rows must split evenly over 3 cores"),
    # Repeat: rows with no legal DMA split
    (Repeat, {"rows": 8, "cols": 513, "repeat": 4}, None, "cols",
     "(unsplit: d0 (innermost, 513 elements) is not a whole number of 4-byte words)"),
    (Repeat, {"rows": 8, "cols": 1031, "repeat": 4}, None, "cols", "no divisor of cols does"),
    (Repeat, {"rows": 8, "cols": 2062, "repeat": 4}, None, "cols",
     "(unsplit: d0 (innermost) is 1031 4-byte words; at most 1023"),
    (Repeat, {"rows": 8, "cols": 64, "repeat": 65}, None, "repeat", "at most 64"),
    (Repeat, {"rows": 8, "cols": 64, "repeat": 2, "dtype": "float64"}, None, "dtype",
     "at most 4 bytes per element"),
    # Transpose: dimensions that do not tile
    (Transpose, {"M": 64, "N": 128, "num_aie_columns": 3}, NPU2, "num_aie_columns",
     "must divide the 16 column tiles"),
    (Transpose, {"M": 24, "N": 64, "num_channels": 2}, NPU2, "num_channels",
     "must divide the 3 row tiles"),
    (Transpose, {"M": 100, "N": 64}, None, "M", "a multiple of 8"),
    (Transpose, {"M": 64, "N": 64, "tile_n": 48}, None, "tile_n", "divides N=64"),
    (Transpose, {"M": 16384, "N": 64, "num_aie_columns": 1}, NPU2, "tile_m",
     "d3 (outermost, 128) is the iteration count: at most 64"),
    # Dequant
    (Dequant, {"size": 1000}, None, "size", "a multiple of tile_size=256"),
    (Dequant, {"size": 1024, "tile_size": 100}, None, "tile_size", "a multiple of group_size=32"),
    (Dequant, {"size": 1024, "group_size": 3}, None, "group_size", "an even number"),
    (Dequant, {"size": 1024, "tile_size": 0}, None, "tile_size", "a multiple of group_size=32"),
    # the rest
    (Clamp, {"size": 1024, "lo": 2.0, "hi": 1.0}, None, "lo", "at most hi=1.0"),
    (Softmax, {"rows": 4, "cols": 64, "valid": 65}, None, "valid", "1 to cols=64"),
    # StridedCopy: patterns that leave the buffers or break a buffer descriptor
    (StridedCopy, strided((256,), (8,), "float32", input_buffer_size=1024), None,
     "input_buffer_size", "reads up to element 2040, past the input"),
    (StridedCopy, strided((256,), (1,), output_buffer_size=128), None, "output_buffer_size",
     "copies 256 elements"),
    (StridedCopy, strided((2, 2, 2, 2, 2), (16, 8, 4, 2, 1)), None, "sizes", "1 to 4 dimensions"),
    (StridedCopy, strided((4, 4), (4,)), None, "strides", "one non-negative stride per dimension"),
    (StridedCopy, strided((2, 2048), (4096, 1)), None, "sizes",
     "d0 (innermost) is 1024 4-byte words; at most 1023"),
    (StridedCopy, strided((1024, 2), (4, 1)), None, "sizes",
     "d1 (1024) exceeds its 1023 wrap"),
    (StridedCopy, strided((65, 2, 2, 2), (64, 16, 4, 1)), None, "sizes",
     "d3 (outermost, 65) is the iteration count: at most 64"),
    (StridedCopy, strided((256,), (4,)), None, "strides", "with 2-byte elements it must be 1"),
    (StridedCopy, strided((4, 8), (0, 1)), None, "strides",
     "the d1 stride is 0; only d3 (outermost) may be"),
    (StridedCopy, strided((2, 2), (2**22, 1), input_buffer_size=2**22 + 8), None, "strides",
     "the d1 stride is 2097152 4-byte words; at most 1048576"),
    (StridedCopy, strided((3,), (1,)), None, "sizes", "3 elements of 2 bytes"),
    (StridedCopy, strided((64,), (1,), "int8"), None, "dtype", "one of bf16, float32"),
]  # fmt: skip


@pytest.mark.parametrize(
    "cls,params,device,parameter,rule",
    REFUSALS,
    ids=[f"{c.__name__}-{p}-{'-'.join(map(str, k.values()))[:40]}" for c, k, _, p, _ in REFUSALS],
)
def test_refusal_names_operator_parameter_and_rule(cls, params, device, parameter, rule):
    with pytest.raises(OperatorError) as refusal:
        op = cls(**params)
        if device is not None:
            op.resolve(device)
    message = str(refusal.value)
    assert message.startswith(f"{cls.__name__}: {parameter}="), message
    assert rule in message, message


def test_device_refusals_wait_for_the_device():
    op = ReLU(size=8192, num_aie_columns=8)  # fine until a device is known
    assert op.resolve(NPU2).num_aie_columns == 8
    with pytest.raises(OperatorError, match="num_aie_columns=8"):
        op.resolve(NPU1)


@pytest.mark.parametrize(
    "values,named",
    [
        ({"valid": 0}, "Softmax: valid=0: 1 to cols=64"),
        ({"valid": 99}, "Softmax: valid=99: 1 to cols=64"),
    ],
)
def test_softmax_refuses_a_per_call_valid_out_of_range(values, named):
    op = Softmax(rows=2, cols=64)
    with pytest.raises(OperatorError, match=re.escape(named)):
        op.call_reference(np.zeros((2, 64), bf16), **values)


@pytest.mark.parametrize(
    "values,named",
    [
        ({"in_offset": 100}, "in_offset=100: out of range: the pattern would read up to "
                             "element 2083 of the 2048-element input"),
        ({"in_offset": -2}, "in_offset=-2: out of range"),
        ({"out_offset": 7200}, "out_offset=7200: out of range: the copy would write elements "
                               "7200 to 8223 of the 8192-element output"),
        ({"in_offset": 3}, "in_offset=3: a DMA offset must be 4-byte aligned (a multiple of 2 "
                           "bf16 elements)"),
        ({"out_offset": 5}, "out_offset=5: a DMA offset must be 4-byte aligned"),
    ],
)  # fmt: skip
def test_strided_copy_checks_per_call_offsets(values, named):
    op = StridedCopy(**strided((16, 64), (128, 1), input_buffer_size=2048))
    x, y = np.zeros(2048, bf16), np.zeros(8192, bf16)
    with pytest.raises(OperatorError, match=re.escape("StridedCopy: " + named)):
        op.call_reference(x, y, **values)
