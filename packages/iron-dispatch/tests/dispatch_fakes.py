"""Small operators for iron-dispatch's tests (dispatch never imports a family)."""

import threading
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
from iron.design import (
    TAP,
    Acquire,
    Call,
    Design,
    Drain,
    Fill,
    Kernel,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    Release,
    Scalar,
    Tensor,
    Worker,
    core,
    examples,
    shim,
    shipped,
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


# ---- operators with designs (iron-design's example programs), int32 and exact ----


def add_k_model(x, y, n, k):
    """The arithmetic of a kernel adding the per-call `k` to `n` elements."""
    y[:n] = x[:n] + np.int32(k)


def _add_k_design(device, size, tile):
    line = Memref((tile,), "i32")
    kernel = Kernel(
        "add_k_i32",
        (line, line, Scalar("i32"), Scalar("i32")),
        shipped("iron.design", "kernels/add_one.cc"),
        add_k_model,
    )
    body = (
        Acquire("in"),
        Acquire("out"),
        Call(kernel, (Obj("in"), Obj("out"), tile, Param("k"))),
        Release("in"),
        Release("out"),
    )
    return Design(
        "add_k",
        device,
        (Tensor("x", (size,), "i32", IN), Tensor("y", (size,), "i32", OUT)),
        fifos=(
            ObjectFifo("in", (tile,), "i32", shim(), (core("adder"),)),
            ObjectFifo("out", (tile,), "i32", core("adder"), (shim(),)),
        ),
        workers=(Worker("adder", body),),
        sequence=(Fill("in", "x", TAP.linear(size)), Drain("out", "y", TAP.linear(size))),
        params=(Param("k", member="k"),),
    )


@attrs.frozen
class AddOne(Operator):
    """y = x + 1 (int32), with iron-design's add_one example as its design."""

    size: int
    tile: int = 256

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size, np.int32)

    def reference(self, x):
        return x + np.int32(1)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()

    @staticmethod
    def design(size, tile, device):
        return examples.add_one(device, n=size, tile=tile)


@attrs.frozen
class AddK(AddOne):
    """y = x + k, k per call: its design reads k from the scratchpad."""

    k: int = per_call(0)

    def reference(self, x, *, k):
        return x + np.int32(k)

    @staticmethod
    def design(size, tile, device):
        return _add_k_design(device, size, tile)


@attrs.frozen
class Twice(AddOne):
    """y = 2 x (int32), with no design: it runs on the host model."""

    design = None

    def reference(self, x):
        return x * np.int32(2)


@attrs.frozen
class Add32(Operator):
    """y = a + b (int32), no design: it runs on the host model."""

    size: int

    @staticmethod
    def arg_spec(size):
        return same_shape_binary(size, np.int32)

    def reference(self, a, b):
        return a + b

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()


@attrs.frozen
class OffByOne(AddOne):
    """A design that disagrees with its reference (x + 1 against x + 2)."""

    def reference(self, x):
        return x + np.int32(2)


# ---- a small stateful model: slices, in-place steps, a state, per-call values ----

N, ROWS = 256, 16


def make_model(w, backend="reference", mode="fused", poison=True, **kw):
    """Each input row times w is written into a state cache at rows pos..;
    the output sums the cache's first pos + rows rows."""

    @graph(backend=backend, mode=mode, poison=poison, **kw)
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

    def build(staging):
        with open(log, "a") as f:
            f.write("built\n")
        time.sleep(0.5)
        (staging / "artifact.txt").write_text("artifact-" + key)

    entry, hit = cache.get_or_build(key, build)
    with open(out, "a") as f:
        f.write(f"{(entry / 'artifact.txt').read_text()} {hit}\n")


def compile_in_process(root, out, start):
    """One of several processes compiling one graph into one cache at once."""
    import os

    os.environ["IRON_CACHE_HOME"] = str(root)

    @graph(backend="sim", device="npu1")
    def raced(g, x):
        return g(AddOne(1024), g(AddOne(1024), x))

    start.wait()
    raced.compile(((1024,), np.int32))
    sim = raced.backend
    with open(out, "a") as f:
        f.write(f"{sim.hits} {sim.misses}\n")


# ---- a host kernel, for the cpu backend -------------------------------------------

#: rows written by `write_row_in_place`; calls of this module's `warm_up`
HOST_WRITES, WARM_UPS = [], []


#: `warm_up` waits for it: a test holds it cleared to see who waits for the warm-up
WARM_UP_GATE = threading.Event()
WARM_UP_GATE.set()


def warm_up():
    """What a JIT'd kernel module does to compile ahead: here, counted."""
    assert WARM_UP_GATE.wait(30)
    WARM_UPS.append(len(HOST_WRITES))
    return {"seconds": 0.0}


def write_row_in_place(op, x, cache, *, row):
    """WriteRowInPlace's host kernel: the row alone, in place."""
    cache[row] = x
    HOST_WRITES.append(row)


@attrs.frozen
class WriteRowInPlace(WriteRow):
    host = "dispatch_fakes:write_row_in_place"


#: the factors of each group of ScaleTogether steps its `host_steps` kernel ran
GROUPS = []


def scale(op, x, y):
    y[...] = op.reference(x)


def scale_steps(ops, arrays):
    """ScaleTogether's kernel for consecutive steps: each as `scale`, the
    group recorded."""
    GROUPS.append([op.factor for op in ops])
    for op, (x, y) in zip(ops, arrays):
        scale(op, x, y)


@attrs.frozen
class ScaleTogether(Scale):
    host = "dispatch_fakes:scale"
    host_steps = "dispatch_fakes:scale_steps"


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


# ---- a program compiled in one process and run in another ------------------------


def compile_registered(root, out):
    """Compile a graph of registered operators (a design and its numpy
    model) into the cache at `root`; write the entry's program path to `out`."""
    import os

    os.environ["IRON_CACHE_HOME"] = str(root)
    from iron.dispatch import CompileCache
    from iron.ops.eltwise import ReLU

    @graph(backend="sim", device="npu2")
    def relu(g, x):
        return g(ReLU(size=x.size), x)

    relu.compile(((1024,), bf16))
    (entry,) = CompileCache(root).entries()
    with open(out, "w") as f:
        f.write(os.path.join(entry["path"], "program0.json"))
