"""Designs whose answers are known without a simulator: the programs the
checker, the simulator and the emitter are proven on, and the examples
`iron design show` can print.

- `passthrough`: shim -> memtile -> shim; output = input.
- `add_one`: one core runs a kernel; output = input + 1.
- `repeat`: a memtile fifo with `repeat_count`; output = the input N times.
- `transpose`: the fill's access pattern alone transposes; output = input.T.
- `split_join`: a memtile split across cores and a join back; output = input + 1.
"""

from __future__ import annotations

import numpy as np

from iron.core.device import Device
from iron.core.spec import IN, OUT
from iron.design.kernel_batch import batched
from iron.design.model import (
    I32_MAX,
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
    Release,
    Scalar,
    Tensor,
    Worker,
    core,
    forward,
    join,
    memtile,
    require_int,
    shim,
    shipped,
    split,
)


def _sizes(example: str, **sizes) -> None:
    """Each size an int of 1..I32_MAX, refused before anything is built."""
    for name, value in sizes.items():
        require_int(f"{example}: {name}", value, 1, I32_MAX)


def add_one_model(x: np.ndarray, y: np.ndarray, n: int) -> None:
    """The exact arithmetic of kernels/add_one.cc."""
    y[:n] = x[:n] + np.int32(1)


def _add_one_rows(x: np.ndarray, y, n) -> np.ndarray:
    """`add_one_model` for a stack of calls (`iron.design.kernel_batch`)."""
    return x + np.int32(1)


def _write_first(row: np.ndarray, x, y: np.ndarray, n: int) -> None:
    y[:n] = row[:n]


def _whole_line(x, y: np.ndarray, n: int) -> bool:
    return n >= y.size


batched(
    add_one_model,
    reads=(0,),
    writes=(1,),
    compute=_add_one_rows,
    write=_write_first,
    whole=_whole_line,
)


def add_one_kernel(tile: int) -> Kernel:
    line = Memref((tile,), "i32")
    return Kernel(
        "add_one_i32",
        (line, line, Scalar("i32")),
        shipped("iron.design", "kernels/add_one.cc"),
        add_one_model,
    )


def _add_one_worker(name: str, source: str, sink: str, tile: int) -> Worker:
    return Worker(
        name,
        (
            Acquire(source),
            Acquire(sink),
            Call(add_one_kernel(tile), (Obj(source), Obj(sink), tile)),
            Release(source),
            Release(sink),
        ),
    )


def _io(n: int, dtype: str, out: int | None = None) -> tuple[Tensor, Tensor]:
    return Tensor("x", (n,), dtype, IN), Tensor("y", (out or n,), dtype, OUT)


def passthrough(device: Device, n: int = 4096, tile: int = 1024, dtype: str = "i32") -> Design:
    """DMA only: `tile`-element objects through a memtile forward."""
    _sizes("passthrough", n=n, tile=tile)
    return Design(
        "passthrough",
        device,
        _io(n, dtype),
        fifos=(
            ObjectFifo("in", (tile,), dtype, shim(), (memtile("fwd"),)),
            ObjectFifo("out", (tile,), dtype, memtile("fwd"), (shim(),)),
        ),
        workers=(),
        links=(forward("fwd", "in", "out"),),
        sequence=(Fill("in", "x", TAP.linear(n)), Drain("out", "y", TAP.linear(n))),
    )


def add_one(device: Device, n: int = 4096, tile: int = 1024) -> Design:
    """One worker adds one to each `tile`-element line."""
    _sizes("add_one", n=n, tile=tile)
    return Design(
        "add_one",
        device,
        _io(n, "i32"),
        fifos=(
            ObjectFifo("in", (tile,), "i32", shim(), (core("adder"),)),
            ObjectFifo("out", (tile,), "i32", core("adder"), (shim(),)),
        ),
        workers=(_add_one_worker("adder", "in", "out", tile),),
        sequence=(Fill("in", "x", TAP.linear(n)), Drain("out", "y", TAP.linear(n))),
    )


def repeat(device: Device, n: int = 1024, times: int = 4) -> Design:
    """One object in, sent `times` times by the memtile."""
    _sizes("repeat", n=n, times=times)
    return Design(
        "repeat",
        device,
        _io(n, "i32", out=n * times),
        fifos=(
            ObjectFifo("in", (n,), "i32", shim(), (memtile("fwd"),), depth=1),
            ObjectFifo("out", (n,), "i32", memtile("fwd"), (shim(),), depth=1, repeat_count=times),
        ),
        workers=(),
        links=(forward("fwd", "in", "out"),),
        sequence=(Fill("in", "x", TAP.linear(n)), Drain("out", "y", TAP.linear(n * times))),
    )


def transpose(device: Device, rows: int = 64, cols: int = 32) -> Design:
    """A `rows` x `cols` int32 matrix read column by column: each object is
    one column of the input, which is one row of the output."""
    _sizes("transpose", rows=rows, cols=cols)
    return Design(
        "transpose",
        device,
        (Tensor("x", (rows, cols), "i32", IN), Tensor("y", (cols, rows), "i32", OUT)),
        fifos=(
            ObjectFifo("in", (rows,), "i32", shim(), (memtile("fwd"),)),
            ObjectFifo("out", (rows,), "i32", memtile("fwd"), (shim(),)),
        ),
        workers=(),
        links=(forward("fwd", "in", "out"),),
        sequence=(
            Fill("in", "x", TAP(0, (cols, rows), (1, cols))),
            Drain("out", "y", TAP.linear(rows * cols)),
        ),
    )


def split_join(device: Device, n: int = 4096, tile: int = 256, workers: int = 4) -> Design:
    """A memtile splits each `workers * tile` object across `workers` cores,
    each adds one, and a memtile join gathers the lines back. More workers
    than the device has cores are refused before anything is built."""
    _sizes("split_join", n=n, tile=tile)
    require_int("split_join: workers (one per core tile)", workers, 1, device.cores)
    lanes = range(workers)
    fifos = [
        ObjectFifo("in", (workers * tile,), "i32", shim(), (memtile("scatter"),)),
        ObjectFifo("out", (workers * tile,), "i32", memtile("gather"), (shim(),)),
    ]
    for i in lanes:
        fifos.append(ObjectFifo(f"in{i}", (tile,), "i32", memtile("scatter"), (core(f"adder{i}"),)))
        fifos.append(ObjectFifo(f"out{i}", (tile,), "i32", core(f"adder{i}"), (memtile("gather"),)))
    offsets = [i * tile for i in lanes]
    return Design(
        "split_join",
        device,
        _io(n, "i32"),
        fifos=tuple(fifos),
        workers=tuple(_add_one_worker(f"adder{i}", f"in{i}", f"out{i}", tile) for i in lanes),
        links=(
            split("scatter", "in", [f"in{i}" for i in lanes], offsets),
            join("gather", [f"out{i}" for i in lanes], "out", offsets),
        ),
        sequence=(Fill("in", "x", TAP.linear(n)), Drain("out", "y", TAP.linear(n))),
    )


EXAMPLES = {
    "passthrough": passthrough,
    "add_one": add_one,
    "repeat": repeat,
    "transpose": transpose,
    "split_join": split_join,
}
