"""Numerics the operator families share: one rounding to bf16, a sigmoid
that neither overflows nor loses its tails, and the tolerance of a sum of
products, scaled by the mass of the data it summed."""

from __future__ import annotations

import math

import numpy as np

from iron.core.spec import bf16
from iron.core.tolerance import Tolerance

#: mean |x| of a standard normal: the scale `Operator.example_inputs` draws
UNIT_MEAN_ABS = math.sqrt(2 / math.pi)


def round_to_bf16(x, *, floor: bool = False) -> np.ndarray:
    """float32 or float64 values rounded to bf16 once: to nearest, ties to
    even, or with `floor` toward -inf (an AIE core's power-up mode). float64
    goes to float32 rounded to odd first, which keeps the second rounding
    exact (a plain cast would round twice). NaN stays NaN."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        x = _float32_rounded_to_odd(x)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not floor:
        return x.astype(bf16)
    bits = x.view(np.uint32)
    # toward -inf: truncate the low half; a negative value with bits dropped
    # grows one bf16 ulp in magnitude (and -max overflows to -inf, as it must)
    away = ((bits >> 31) == 1) & ((bits & 0xFFFF) != 0)
    out = ((bits >> 16) + away).astype(np.uint16).view(bf16)
    out[np.isnan(x)] = np.nan  # truncation could turn a NaN payload into inf
    return out


def _float32_rounded_to_odd(exact: np.ndarray) -> np.ndarray:
    """The float32 toward zero, its last bit set when inexact: any later
    rounding to 8 significant bits then equals one rounding of `exact`."""
    near = exact.astype(np.float32)
    bits = near.view(np.uint32)
    overshoot = np.abs(near.astype(np.float64)) > np.abs(exact)
    bits = bits - overshoot.astype(np.uint32)  # toward zero
    inexact = bits.view(np.float32).astype(np.float64) != exact
    return (bits | inexact.astype(np.uint32)).view(np.float32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) for float32 `x`, as exp(min(x, 0)) / (1 + exp(-|x|)):
    nothing overflows, both tails keep their relative precision, and there
    is no branch (np.where over random signs is the slow part)."""
    return np.exp(np.minimum(x, np.float32(0))) / (np.float32(1) + np.exp(-np.abs(x)))


def finite_abs(array) -> np.ndarray:
    """|x| of the finite elements, flat: garbage (NaN, inf) must not set a bound."""
    values = np.abs(np.asarray(array, dtype=np.float64)).ravel()
    return values[np.isfinite(values)]


def mean_abs(array, default: float = UNIT_MEAN_ABS) -> float:
    """Mean |x| over the finite elements of `array` (0 without one);
    `default` when `array` is None."""
    if array is None:
        return default
    values = finite_abs(array)
    return float(values.mean()) if values.size else 0.0


def product_tolerance(
    budget: float, k: int, mean_a: float = UNIT_MEAN_ABS, mean_b: float = UNIT_MEAN_ABS
) -> Tolerance:
    """Relative 0.04 (a bf16 result, accumulated in another order) with an
    absolute floor of `budget` times the product's mass, k * mean|a| *
    mean|b|: the size of a sum of k products. A result that cancels to near
    zero is judged against what its sum moved through, and garbage of that
    size still fails. The defaults are standard-normal inputs."""
    return Tolerance.relative(0.04, atol=budget * k * mean_a * mean_b)
