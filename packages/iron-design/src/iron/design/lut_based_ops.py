"""numpy models of mlir-aie's lookup-table functions (``aie_runtime_lib/AIE2/
lut_based_ops.h`` at iron-design's pinned mlir-aie), which aie2 kernels of
more than one family include: their exact arithmetic, table and all, so a
kernel model built on them follows the core bit for bit."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from iron.core.numerics import round_to_bf16

#: (slope, offset) of tanh on each quarter of [0, 4), as bf16 values, read
#: from ``lut_based_ops.cpp`` (``tanh_lut_ab``); the table there holds both
#: halves, the negative one mirrored (odd symmetry)
_TANH_POSITIVE = (
    (1.0, 0.0),
    (0.8671875, 0.03076171875),
    (0.69140625, 0.11962890625),
    (0.50390625, 0.259765625),
    (0.34765625, 0.416015625),
    (0.2294921875, 0.5625),
    (0.1455078125, 0.6875),
    (0.091796875, 0.78125),
    (0.056396484375, 0.8515625),
    (0.035400390625, 0.8984375),
    (0.021240234375, 0.93359375),
    (0.0126953125, 0.95703125),
    (0.00750732421875, 0.97265625),
    (0.005096435546875, 0.98046875),
    (0.002838134765625, 0.98828125),
    (0.0, 1.0),
)
_TANH_SLOPE = np.array(
    [s for s, _ in reversed(_TANH_POSITIVE)] + [s for s, _ in _TANH_POSITIVE], np.float32
)
_TANH_OFFSET = np.array(
    [-o for _, o in reversed(_TANH_POSITIVE)] + [o for _, o in _TANH_POSITIVE], np.float32
)


def tanh_bf16(x, *, floor: bool = False) -> np.ndarray:
    """``getTanhBf16``: aie::linear_approx over 32 segments of width 1/4 on
    [-4, 4] (step_bits -2, bias 16), the index floored and saturated at both
    ends, slope * x + offset in the float accumulator, returned as bf16 in
    the core's rounding mode: to nearest even, or (`floor`) toward -inf.
    `x` must hold bf16 values (the function takes a bf16 vector; a caller
    converts in its own mode); the result is bf16."""
    x = np.asarray(x, np.float32)
    if not np.array_equal(x.astype(ml_dtypes.bfloat16).astype(np.float32), x, equal_nan=True):
        raise ValueError("getTanhBf16 reads bf16 values; convert the argument first")
    with np.errstate(invalid="ignore"):
        index = np.clip(np.floor(x * np.float32(4)), -16, 15).astype(np.int64) + 16
    index = np.where(np.isnan(x), 16, index)
    return round_to_bf16(_TANH_SLOPE[index] * x + _TANH_OFFSET[index], floor=floor)
