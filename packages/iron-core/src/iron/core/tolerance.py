"""How close is close enough: each operator states its own `Tolerance`, and
`compare` judges an output against a reference with it."""

from __future__ import annotations

import attrs
import numpy as np


@attrs.frozen
class Tolerance:
    """`exact()` compares bits (data movers: any looser tolerance also accepts
    a wrong permutation). `relative(rtol, atol)` accepts |a - e| <= atol +
    rtol * |e| elementwise, and up to `max_mismatch_frac` of the elements
    may miss it."""

    rtol: float = 0.0
    atol: float = 0.0
    max_mismatch_frac: float = 0.0
    is_exact: bool = False

    @classmethod
    def exact(cls) -> Tolerance:
        return cls(is_exact=True)

    @classmethod
    def relative(cls, rtol: float, atol: float = 0.0, max_mismatch_frac: float = 0.0) -> Tolerance:
        if rtol < 0 or atol < 0 or not 0 <= max_mismatch_frac < 1:
            raise ValueError(
                f"Tolerance.relative needs rtol >= 0, atol >= 0, 0 <= max_mismatch_frac < 1; "
                f"got rtol={rtol}, atol={atol}, max_mismatch_frac={max_mismatch_frac}"
            )
        return cls(rtol=float(rtol), atol=float(atol), max_mismatch_frac=float(max_mismatch_frac))

    def __str__(self) -> str:
        if self.is_exact:
            return "exact"
        allowed = f", {self.max_mismatch_frac:.2%} may miss" if self.max_mismatch_frac else ""
        return f"rtol {self.rtol:g}, atol {self.atol:g}{allowed}"


@attrs.frozen
class Verdict:
    """The judgement of one buffer. Truthy when it passed."""

    passed: bool
    n_mismatch: int
    n_checked: int
    max_abs: float
    max_rel: float
    worst_index: tuple[int, ...] | None
    detail: str

    def __bool__(self) -> bool:
        return self.passed


def _as_bits(array: np.ndarray) -> np.ndarray:
    """Elements as unsigned integers of the same width, so NaN payloads and
    signed zeros count."""
    return np.ascontiguousarray(array).view(f"u{array.dtype.itemsize}")


def _unjudgeable(expected: np.ndarray, detail: str) -> Verdict:
    return Verdict(False, expected.size, expected.size, np.inf, np.inf, None, detail)


def compare(actual, expected, tolerance: Tolerance, name: str = "output") -> Verdict:
    """Judge `actual` against `expected` under `tolerance`; NaN matches only NaN."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return _unjudgeable(expected, f"{name}: shape {actual.shape} != expected {expected.shape}")
    if tolerance.is_exact and actual.dtype != expected.dtype:
        return _unjudgeable(expected, f"{name}: dtype {actual.dtype} != expected {expected.dtype}")
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = np.abs(a - e)
        both_nan = np.isnan(a) & np.isnan(e)
        diff = np.where(both_nan | (a == e), 0.0, diff)  # equal infinities too
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = np.where(diff == 0, 0.0, diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny))
        rel = np.where(np.isnan(rel), np.inf, rel)
        if tolerance.is_exact:
            miss = _as_bits(actual) != _as_bits(expected)
        else:
            miss = diff > tolerance.atol + tolerance.rtol * np.abs(
                np.nan_to_num(e, posinf=0, neginf=0)
            )
            miss |= diff == np.inf
    n, n_miss = expected.size, int(np.count_nonzero(miss))
    allowed = int(np.floor(tolerance.max_mismatch_frac * n))
    passed = n_miss <= allowed
    max_abs = float(diff.max()) if n else 0.0
    max_rel = float(rel.max()) if n else 0.0
    worst = None
    if n_miss:
        flat = int(np.argmax(np.where(miss, diff, -1.0)))
        worst = tuple(int(i) for i in np.unravel_index(flat, expected.shape))
    if passed:
        detail = f"{name}: ok ({n_miss}/{n} outside {tolerance}; max abs {max_abs:.3g})"
    else:
        detail = (
            f"{name}: {n_miss}/{n} elements outside {tolerance} (allowed {allowed}); "
            f"worst at {worst}: got {actual[worst]!r}, expected {expected[worst]!r}; "
            f"max abs {max_abs:.3g}, max rel {max_rel:.3g}"
        )
    return Verdict(passed, n_miss, n, max_abs, max_rel, worst, detail)
