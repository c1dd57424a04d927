import numpy as np
import pytest

from iron.core import Tolerance, bf16, compare


def test_exact_compares_bits():
    a = np.array([1.0, -0.0, np.nan], dtype=np.float32)
    assert compare(a, a.copy(), Tolerance.exact())
    b = a.copy()
    b[1] = 0.0  # signed zero differs in bits only
    verdict = compare(b, a, Tolerance.exact())
    assert not verdict and verdict.n_mismatch == 1 and verdict.worst_index == (1,)


def test_exact_refuses_other_dtype():
    verdict = compare(np.zeros(4, np.float32), np.zeros(4, bf16), Tolerance.exact())
    assert not verdict and "dtype" in verdict.detail


def test_relative_bound_and_atol():
    expected = np.array([100.0, 1.0, 0.0])
    tol = Tolerance.relative(0.01, atol=0.001)
    assert compare(expected + np.array([0.9, 0.0105, 0.0009]), expected, tol)
    verdict = compare(expected + np.array([1.2, 0.0, 0.0]), expected, tol)
    assert not verdict and verdict.worst_index == (0,)
    assert "1/3 elements" in verdict.detail and "expected" in verdict.detail


def test_mismatch_fraction_allows_a_few_outliers():
    expected = np.zeros(100)
    actual = expected.copy()
    actual[:3] = 1.0
    assert compare(actual, expected, Tolerance.relative(0.0, 0.0, max_mismatch_frac=0.03))
    assert not compare(actual, expected, Tolerance.relative(0.0, 0.0, max_mismatch_frac=0.02))


def test_nan_matches_only_nan():
    tol = Tolerance.relative(0.5)
    assert compare(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), tol)
    assert not compare(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), tol)
    assert not compare(np.array([np.inf]), np.array([1e30]), tol)
    assert compare(np.array([np.inf]), np.array([np.inf]), tol)


def test_shape_mismatch_fails_with_both_shapes():
    verdict = compare(np.zeros((2, 3)), np.zeros((3, 2)), Tolerance.relative(1.0))
    assert not verdict and "(2, 3)" in verdict.detail and "(3, 2)" in verdict.detail


def test_bad_tolerance_is_refused():
    with pytest.raises(ValueError, match="rtol"):
        Tolerance.relative(-1)
