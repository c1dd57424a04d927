import warnings

import numpy as np
import pytest

from iron.core import Tolerance, bf16
from iron.core.numerics import UNIT_MEAN_ABS, mean_abs, product_tolerance, round_to_bf16, sigmoid


def integers_and_ties(seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(-(2**31), 2**31, 20000)
    # ties and near-ties: multiples of 2^k plus half of 2^k, +-1
    ties = (rng.integers(128, 256, 2000) << 10) + (1 << 9) + rng.integers(-1, 2, 2000)
    return np.concatenate([values, ties, -ties, [0, 1, -1, 255, 256, 257, 2**24 + 2**16 + 1]])


def exact_bf16(v: int, floor: bool) -> float:
    """`v` rounded to 8 significant bits by integer arithmetic."""
    shift = max(0, abs(v).bit_length() - 8)
    if floor:
        return float((v >> shift) << shift)  # >> is floor division, toward -inf
    q, r = divmod(abs(v), 1 << shift)
    half = 1 << shift >> 1
    if shift and (r > half or (r == half and q % 2)):
        q += 1
    return float(q << shift) * (1 if v >= 0 else -1)


@pytest.mark.parametrize("floor", [False, True], ids=["nearest", "floor"])
def test_float64_is_rounded_to_bf16_once_like_integer_arithmetic(floor):
    values = integers_and_ties(4)
    got = round_to_bf16(values.astype(np.float64), floor=floor).astype(np.float64)
    want = [exact_bf16(int(v), floor) for v in values]
    assert got.tolist() == want
    if not floor:  # a plain cast rounds twice, through float32, and misses some
        twice = values.astype(np.float64).astype(np.float32).astype(bf16).astype(np.float64)
        assert twice.tolist() != want


def test_float32_rounding_modes():
    # 1 + 2**-8 is half a bf16 ulp above 1: even keeps 1, floor keeps 1;
    # 1 + 3 * 2**-9 is 0.75 ulp above: even rounds up, floor keeps 1
    x = np.array([1 + 2**-8, 1 + 3 * 2**-9, -(1 + 3 * 2**-9), -(1 + 2**-20), np.nan], np.float32)
    even = round_to_bf16(x).astype(np.float32)
    floor = round_to_bf16(x, floor=True).astype(np.float32)
    assert even[:4].tolist() == [1.0, 1 + 2**-7, -(1 + 2**-7), -1.0]
    assert floor[:4].tolist() == [1.0, 1.0, -(1 + 2**-7), -(1 + 2**-7)]
    assert np.isnan(even[4]) and np.isnan(floor[4])
    assert round_to_bf16(x, floor=True).dtype == bf16


def test_sigmoid_keeps_both_tails_without_overflow():
    x = np.array([-80, -20, -1, 0, 1, 20, 100], np.float32)  # e^-80: still a normal float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow in exp would raise here
        got = sigmoid(x)
    want = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-7)  # the far negative tail included
    assert got[-1] == 1 and sigmoid(np.float32(-100)) > 0  # 1 / (1 + e^100) would be 0


def test_product_tolerance_scales_with_the_finite_data():
    assert mean_abs(None) == UNIT_MEAN_ABS and mean_abs(None, 0.5) == 0.5
    assert mean_abs(np.array([1.0, -3.0, np.nan, np.inf])) == 2.0
    assert mean_abs(np.array([np.nan])) == 0.0
    assert product_tolerance(1e-2, 64, 2.0, 0.5) == Tolerance.relative(0.04, atol=0.64)
    assert product_tolerance(1e-2, 64).atol == pytest.approx(0.64 * 2 / np.pi)
