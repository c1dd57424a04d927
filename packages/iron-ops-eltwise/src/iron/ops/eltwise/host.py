"""Host kernels: what the `cpu` backend runs instead of a reference where
the reference would cost more than the operator's bytes. A kernel is
``kernel(op, *arrays, **per_call)`` with the step's arrays in spec order;
it writes its outputs in place (see iron-dispatch's README, "Writing a
backend").

The numba kernels here are the small steps between a decode's GEMVs
(norms, RoPE, softmax, residual adds, SiLU and its product): a few
thousand elements each, where a reference's numpy calls and bf16
conversions cost more than the arithmetic. They run on the calling thread
alone: a parallel launch (waking a second worker) would cost more than the
work, and one thread makes the bits independent of the thread count.
Numerics are the references': bf16 in, float32 inside, one rounding to
bf16 (to nearest even) per output. A step whose arrays are not bf16 runs
its reference.

This module also holds the bf16 bit tricks the gemm family's host kernels
share (`widen`, `to_bf16`, `bits16`) and where every iron host kernel's
compiled code is kept (`use_user_cache`); `warm_up` compiles (or loads)
every kernel.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import caching
from numba.extending import intrinsic

from iron.core import bf16, settings

# ---- where compiled kernels are kept ------------------------------------------------


class _UserCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """Numba's cache of an ``iron.*`` module's kernels in the user cache,
    ``IRON_KERNEL_CACHE/<module>`` (``IRON_CACHE_HOME/numba/<module>`` by
    default), instead of beside the source: every
    venv and clone of the same code then loads what one compiled (numba's
    own stamp, the source's sha256, and its version check keep a changed
    module or another numba from loading stale code)."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._path = kernel_cache_dir(py_func.__module__)

    def get_cache_path(self):
        return str(self._path)

    @classmethod
    def from_function(cls, py_func, py_file):
        if not py_func.__module__.startswith("iron.") or not os.path.exists(py_file):
            return None
        locator = cls(py_func, py_file)
        try:
            locator.ensure_cache_path()
        except OSError:  # not writable: numba's own locators decide
            return None
        return locator


def use_user_cache() -> None:
    """Cache iron's kernels in the user cache (`_UserCacheLocator`) from now
    on; ``NUMBA_CACHE_DIR``, when set, still wins. A host-kernel module calls
    this before defining its kernels. The list of locators is numba's own
    (``CacheImpl``, ``_CacheImpl`` before 0.62): where it is not found,
    kernels stay cached beside their source."""
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    locators = getattr(impl, "_locator_classes", None)
    if isinstance(locators, list) and _UserCacheLocator not in locators:
        locators.insert(locators.index(caching.UserProvidedCacheLocator) + 1, _UserCacheLocator)


def kernel_cache_dir(module: str) -> Path:
    """Where `module`'s compiled kernels are kept (unless NUMBA_CACHE_DIR is set)."""
    return settings.current().kernel_cache / module


use_user_cache()


@intrinsic
def widen(typingctx, bits):
    """bf16 bits (uint16) -> float32: shift into the top half, reinterpret."""

    def codegen(context, builder, signature, args):
        wide = builder.shl(builder.zext(args[0], ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
        return builder.bitcast(wide, ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _bits(typingctx, value):
    """float32 -> its uint32 bits."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@njit(inline="always", cache=True)
def to_bf16(value):
    """float32 -> bf16 bits, to nearest even; a NaN stays a (quiet) NaN."""
    bits = _bits(np.float32(value))
    if value != value:
        return np.uint16((bits >> 16) | 0x40)
    return np.uint16((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16)


def bits16(array: np.ndarray) -> np.ndarray:
    """A bf16 array's bits, as numba can take them (it knows no bf16)."""
    return array.view(np.uint16)


def readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view of `array`. A weight reaches a kernel as one always:
    numba compiles read-only and writable arrays apart, and a weight may be
    read where it lies, in a checkpoint's read-only mapping."""
    out = array.view()
    out.flags.writeable = False
    return out


def _all_bf16(*arrays) -> bool:
    return all(a.dtype == bf16 for a in arrays)


# ---- kernels ----------------------------------------------------------------------


@njit(cache=True)
def _add(a, b, y):
    for i in range(y.shape[0]):
        y[i] = to_bf16(widen(a[i]) + widen(b[i]))


@njit(cache=True)
def _mul(a, b, y):
    for i in range(y.shape[0]):
        y[i] = to_bf16(widen(a[i]) * widen(b[i]))


@njit(cache=True)
def _silu(x, y):
    """x * sigmoid(x), the sigmoid as iron.core.numerics has it:
    exp(min(x, 0)) / (1 + exp(-|x|)), so nothing overflows; its numerator
    is 1 or the denominator's exp, so one exp an element does."""
    for i in range(y.shape[0]):
        v = widen(x[i])
        tail = np.exp(-abs(v))
        s = (np.float32(1) if v >= 0 else tail) / (np.float32(1) + tail)
        y[i] = to_bf16(v * s)


@njit(cache=True)
def _rms_norm(x, weight, y, eps, weighted):
    rows, cols = x.shape
    for r in range(rows):
        total = np.float32(0)
        for c in range(cols):
            v = widen(x[r, c])
            total += v * v
        root = np.sqrt(total / np.float32(cols) + eps)
        for c in range(cols):
            v = widen(x[r, c]) / root
            y[r, c] = to_bf16(v * widen(weight[c]) if weighted else v)


@njit(cache=True)
def _rope(x, angles, y, two_halves):
    """Row r turns by angle row r // (rows / angle_rows); pair i is
    (i, i + cols/2) in two halves, (2i, 2i + 1) interleaved. Both of a
    pair are read before either is written, so y may be x."""
    rows, cols = x.shape
    half, per_angle_row = cols // 2, rows // angles.shape[0]
    for r in range(rows):
        angle = angles[r // per_angle_row]
        for i in range(half):
            first, second = (i, i + half) if two_halves else (2 * i, 2 * i + 1)
            cos, sin = widen(angle[2 * i]), widen(angle[2 * i + 1])
            x1, x2 = widen(x[r, first]), widen(x[r, second])
            y[r, first] = to_bf16(x1 * cos - x2 * sin)
            y[r, second] = to_bf16(x2 * cos + x1 * sin)


@njit(cache=True)
def _softmax(x, y, valid):
    rows, cols = x.shape
    e = np.empty(valid, np.float32)
    for r in range(rows):
        top = widen(x[r, 0])
        for c in range(1, valid):
            top = max(top, widen(x[r, c]))
        total = np.float32(0)
        for c in range(valid):
            e[c] = np.exp(widen(x[r, c]) - top)
            total += e[c]
        for c in range(valid):
            y[r, c] = to_bf16(e[c] / total)
        for c in range(valid, cols):
            y[r, c] = 0


# ---- the operators' kernels -------------------------------------------------------


def elementwise_add(op, a, b, y):
    if not _all_bf16(a, b, y):
        y[...] = op.reference(a, b)
        return
    _add(bits16(a).reshape(-1), bits16(b).reshape(-1), bits16(y).reshape(-1))


def elementwise_mul(op, a, b, y):
    if not _all_bf16(a, b, y):
        y[...] = op.reference(a, b)
        return
    _mul(bits16(a).reshape(-1), bits16(b).reshape(-1), bits16(y).reshape(-1))


def silu(op, x, y):
    if not _all_bf16(x, y):
        y[...] = op.reference(x)
        return
    _silu(bits16(x).reshape(-1), bits16(y).reshape(-1))


def rms_norm(op, x, *rest):
    *weight, y = rest
    if not _all_bf16(x, y, *weight):
        y[...] = op.reference(x, *weight)
        return
    bits = bits16(weight[0]) if weight else np.zeros(1, np.uint16)
    _rms_norm(bits16(x), readonly(bits), bits16(y), np.float32(op.eps), bool(weight))


def rope(op, x, angles, y):
    if not _all_bf16(x, angles, y):
        y[...] = op.reference(x, angles)
        return
    _rope(bits16(x), bits16(angles), bits16(y), op.method == "two_halves")


def softmax(op, x, y, *, valid):
    op._check_valid(valid)
    if not _all_bf16(x, y):
        y[...] = op.reference(x, valid=valid)
        return
    _softmax(bits16(x), bits16(y), op.cols if valid is None else int(valid))


def strided_copy(op, x, y, *, in_offset, out_offset):
    """Writes the window alone: a KV-cache row lands in the cache in place,
    where the reference returns (and the backend copies back) the whole
    cache."""
    op._check_offsets(in_offset, out_offset)
    start = int(in_offset)
    if len(op.sizes) == 1 and op.strides == (1,):
        source = x[start : start + op.count]
    else:
        shape, strides = op.sizes, tuple(s * x.itemsize for s in op.strides)
        source = np.lib.stride_tricks.as_strided(x[start:], shape, strides, writeable=False)
    y[int(out_offset) : int(out_offset) + op.count] = source.reshape(-1)


def chunk_copy(op, x, y, *, n):
    """The n chunks alone, in place."""
    op.check_call(n=n)
    y[: int(n) * op.chunk] = x[: int(n) * op.chunk]


def warm(calls, status=None) -> dict:
    """Call each ``(kernel, args)`` of `calls` once, which compiles it or
    loads it compiled from the cache, calling ``status(text)`` before each
    with which it is and whether it compiles. Returns the seconds it took,
    how many kernels had to be compiled (0: all came from the cache) and
    the cache directory."""
    started = time.perf_counter()
    for k, (kernel, args) in enumerate(calls):
        if status is not None:
            status(_jit_status(kernel, f"{k + 1} of {len(calls)}"))
        kernel(*args)
    kernels = list(dict.fromkeys(kernel for kernel, _ in calls))  # one per specialisation set
    return {
        "seconds": time.perf_counter() - started,
        "compiled": sum(bool(k.stats.cache_misses) for k in kernels),
        "cache_dir": kernels[0].stats.cache_path,
    }


def _jit_status(kernel, count: str) -> str:
    """What calling `kernel` the first time in this process does: load its
    compiled code, or compile it (when the cache holds no index for it)."""
    where = kernel.stats.cache_path
    code = kernel.py_func.__code__
    pattern = f"*.{kernel.py_func.__qualname__}-{code.co_firstlineno}.py*.nbi"
    name = f"{kernel.py_func.__module__}.{kernel.py_func.__name__}"
    if where and any(Path(where).glob(pattern)):
        return f"loading compiled kernels ({count}: {name})"
    return f"JIT compiling kernels ({count}: {name}; cached in {where} for later runs)"


def warm_up(status=None) -> dict:
    """Compile (or load from the on-disk cache) every kernel on tiny inputs
    (see `warm`)."""
    flat, rows = np.zeros(2, np.uint16), np.zeros((2, 4), np.uint16)
    return warm(
        [
            (_add, (flat, flat, flat.copy())),
            (_mul, (flat, flat, flat.copy())),
            (_silu, (flat, flat.copy())),
            (_rms_norm, (rows, readonly(rows[0]), rows.copy(), np.float32(1e-5), True)),
            (_rope, (rows, rows[:1], rows.copy(), True)),
            (_softmax, (rows, rows.copy(), 2)),
        ],
        status,
    )
