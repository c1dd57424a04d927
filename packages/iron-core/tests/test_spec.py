import ml_dtypes
import numpy as np
import pytest

from iron.core import (
    IN,
    INOUT,
    OUT,
    ArgSpec,
    as_dtype,
    bf16,
    dtype_name,
    same_shape_binary,
    same_shape_unary,
)


def test_directions_read_and_write():
    assert (IN.reads, IN.writes) == (True, False)
    assert (OUT.reads, OUT.writes) == (False, True)
    assert (INOUT.reads, INOUT.writes) == (True, True)


def test_argspec_sizes_and_conversions():
    spec = ArgSpec("x", (4, 256), "bf16", "inout")
    assert spec.dtype == np.dtype(ml_dtypes.bfloat16) and spec.direction is INOUT
    assert spec.size == 1024 and spec.nbytes == 2048
    assert ArgSpec("n", 10, np.int32, OUT).shape == (10,)
    assert ArgSpec("n", 10, np.int32, OUT).nbytes == 40
    assert spec.describe() == ["x", [4, 256], "bf16", "inout"]


def test_argspec_rejects_bad_input():
    with pytest.raises(ValueError, match="shape"):
        ArgSpec("x", (4, -1))
    with pytest.raises(ValueError):
        ArgSpec("x", (4,), bf16, "sideways")
    with pytest.raises(TypeError, match="not a dtype"):
        as_dtype("no-such-type")


def test_shared_shape_rules():
    assert [s.describe() for s in same_shape_unary(1024)] == [
        ["x", [1024], "bf16", "in"],
        ["y", [1024], "bf16", "out"],
    ]
    binary = same_shape_binary((8, 16), np.float32)
    assert [s.direction for s in binary] == [IN, IN, OUT]
    assert all(s.shape == (8, 16) and dtype_name(s.dtype) == "float32" for s in binary)
