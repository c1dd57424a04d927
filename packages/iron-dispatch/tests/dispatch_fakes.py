"""Small operators for iron-dispatch's tests (dispatch never imports a family)."""

import time

import attrs
import numpy as np

from iron.core import (
    IN,
    INOUT,
    OUT,
    ArgSpec,
    Operator,
    Tolerance,
    bf16,
    per_call,
    same_shape_binary,
    same_shape_unary,
)
from iron.dispatch import graph


def _f32(x):
    return x.astype(np.float32)


@attrs.frozen
class Scale(Operator):
    size: int
    factor: float = 2.0

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size)

    def reference(self, x):
        return (_f32(x) * np.float32(self.factor)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01)


@attrs.frozen
class Add(Operator):
    size: int

    @staticmethod
    def arg_spec(size):
        return same_shape_binary(size)

    def reference(self, a, b):
        return (_f32(a) + _f32(b)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01)


@attrs.frozen
class Mul(Add):
    def reference(self, a, b):
        return (_f32(a) * _f32(b)).astype(bf16)


@attrs.frozen
class Shift(Operator):
    """y = x + offset, the offset given per call."""

    size: int
    offset: int = per_call(0)

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size)

    def reference(self, x, *, offset):
        return (_f32(x) + np.float32(offset)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01)


@attrs.frozen
class WriteRow(Operator):
    """cache[row] = x, the row given per call; the rest of cache kept."""

    size: int
    rows: int
    row: int = per_call(0)

    @staticmethod
    def arg_spec(size, rows):
        return [ArgSpec("x", (size,), bf16, IN), ArgSpec("cache", (rows, size), bf16, INOUT)]

    def reference(self, x, cache, *, row):
        out = cache.copy()
        out[row] = x
        return out

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()


@attrs.frozen
class SumRows(Operator):
    """y = sum of the first `valid` rows of cache (valid given per call)."""

    size: int
    rows: int
    valid: int = per_call(1)

    @staticmethod
    def arg_spec(size, rows):
        return [ArgSpec("cache", (rows, size), bf16, IN), ArgSpec("y", (size,), bf16, OUT)]

    def reference(self, cache, *, valid):
        return _f32(cache[:valid]).sum(axis=0).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01, 1e-3)


@attrs.frozen
class Sloppy(Scale):
    """Its reference is deliberately wrong; `simulate` models the device."""

    def reference(self, x):
        return (_f32(x) * np.float32(self.factor) + np.float32(1.0)).astype(bf16)

    def simulate(self, x):
        return (_f32(x) * np.float32(self.factor)).astype(bf16)


@attrs.frozen
class Blurry(Operator):
    """y = valid * x. Its device model errs by 1% of valid * max|x|, which
    only a tolerance told the inputs and the call's `valid` allows for."""

    size: int
    valid: int = per_call(1)

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size)

    def reference(self, x, *, valid):
        return (_f32(x) * valid).astype(bf16)

    def simulate(self, x, *, valid):
        return (_f32(x) * valid + 0.01 * valid * np.abs(_f32(x)).max()).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        if inputs is None:
            return Tolerance.relative(0.01)
        return Tolerance.relative(0.01, atol=0.02 * self.valid * np.abs(_f32(inputs[0])).max())


@attrs.frozen
class Mystery(Scale):
    """A parameter whose text holds an object address."""

    thing: object = None


# ---- a small stateful model: slices, in-place steps, a state, per-call values ----

N, ROWS = 256, 16


def make_model(w, backend="reference", mode="fused", **kw):
    """Each input row times w is written into a state cache at rows pos..;
    the output sums the cache's first pos + rows rows."""

    @graph(backend=backend, mode=mode, poison=True, **kw)
    def model(g, x, *, pos):
        rows = x.shape[0]
        weight = g.weight("w", w)
        cache = g.state("cache", (ROWS, N))
        products = [g(Mul(N), x[i], weight) for i in range(rows)]  # all live at once
        for i, h in enumerate(products):
            g(WriteRow(N, ROWS), h, cache, row=pos + i)
        return g(Scale(N, 1.0), g(SumRows(N, ROWS), cache, valid=pos + rows))

    return model


def expected_outputs(w, calls):
    """The same computation in plain numpy, one rounding per operation."""
    cache = np.zeros((ROWS, N), bf16)
    outs = []
    for x, pos in calls:
        for i in range(x.shape[0]):
            cache[pos + i] = (x[i].astype(np.float32) * w.astype(np.float32)).astype(bf16)
        outs.append(cache[: pos + x.shape[0]].astype(np.float32).sum(0).astype(bf16))
    return outs


def race_for_key(root, key, log, out):
    """One of several processes compiling one cache key at once."""
    from iron.dispatch import CompileCache

    cache = CompileCache(root)

    def build():
        with open(log, "a") as f:
            f.write("built\n")
        time.sleep(0.5)
        return b"artifact-" + key.encode()

    data, hit = cache.get_or_build(key, build)
    with open(out, "a") as f:
        f.write(f"{data.decode()} {hit}\n")


# ---- a host kernel, for the cpu backend -------------------------------------------

#: rows written by `write_row_in_place`; calls of this module's `warm_up`
HOST_WRITES, WARM_UPS = [], []


def warm_up():
    """What a JIT'd kernel module does to compile ahead: here, counted."""
    WARM_UPS.append(len(HOST_WRITES))
    return {"seconds": 0.0}


def write_row_in_place(op, x, cache, *, row):
    """WriteRowInPlace's host kernel: the row alone, in place."""
    cache[row] = x
    HOST_WRITES.append(row)


@attrs.frozen
class WriteRowInPlace(WriteRow):
    host = "dispatch_fakes:write_row_in_place"


def make_host_model(w, backend="cpu"):
    """`make_model`, its cache rows written by a host kernel where the
    backend runs host kernels."""

    @graph(backend=backend, poison=True)
    def model(g, x, *, pos):
        weight = g.weight("w", w)
        cache = g.state("cache", (ROWS, N))
        for i in range(x.shape[0]):
            g(WriteRowInPlace(N, ROWS), g(Mul(N), x[i], weight), cache, row=pos + i)
        return g(Scale(N, 1.0), g(SumRows(N, ROWS), cache, valid=pos + x.shape[0]))

    return model
