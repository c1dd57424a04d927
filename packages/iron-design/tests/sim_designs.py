"""Small designs the simulator tests build on, and the numpy kernel models
they call (module-level, so that designs holding them digest and pickle)."""

from __future__ import annotations

import attrs
import numpy as np

from iron.core.spec import IN, OUT
from iron.design.examples import add_one_kernel
from iron.design.model import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    Kernel,
    LocalBuffer,
    Memref,
    Obj,
    ObjectFifo,
    Release,
    Scalar,
    Tensor,
    Worker,
    core,
    shim,
    shipped,
)


def running_sum_model(x: np.ndarray, y: np.ndarray, total: np.ndarray) -> None:
    """Adds each object into `total` and writes the total so far."""
    total += x
    y[:] = total


def accumulate_model(x: np.ndarray, y: np.ndarray, n: int) -> None:
    """Adds into the object it is handed instead of writing it: wrong on a
    device, whose memory is not cleared."""
    y += x


def scale_model(x: np.ndarray, y: np.ndarray, factor: int) -> None:
    y[:] = x * np.int32(factor)


def failing_model(x: np.ndarray, y: np.ndarray, n: int) -> None:
    raise FloatingPointError("the kernel divided by zero")


def kernel(model, tile: int, scalar: bool = True) -> Kernel:
    line = Memref((tile,), "i32")
    args = (line, line, Scalar("i32")) if scalar else (line, line, line)
    return Kernel(model.__name__, args, shipped("tests", f"{model.__name__}.cc"), model)


def one_worker(device, body, *, n=4096, tile=1024, name="adder", forever=True, **design):
    """x -> fifo `in` -> worker running `body` -> fifo `out` -> y, both
    fifos of `tile`-element objects; `design` overrides Design fields."""
    fields = dict(
        name="one_worker",
        device=device,
        tensors=(Tensor("x", n, "i32", IN), Tensor("y", n, "i32", OUT)),
        fifos=(
            ObjectFifo("in", tile, "i32", shim(), (core(name),)),
            ObjectFifo("out", tile, "i32", core(name), (shim(),)),
        ),
        workers=(Worker(name, tuple(body), forever=forever),),
        sequence=(Fill("in", "x", TAP.linear(n)), Drain("out", "y", TAP.linear(n))),
    )
    return Design(**{**fields, **design})


def add_one_body(tile: int, source="in", sink="out"):
    return (
        Acquire(source),
        Acquire(sink),
        Call(add_one_kernel(tile), (Obj(source), Obj(sink), tile)),
        Release(source),
        Release(sink),
    )


def running_sum_worker(tile: int, initial_value: int | None = 0) -> Worker:
    return Worker(
        "adder",
        (
            Acquire("in"),
            Acquire("out"),
            Call(
                kernel(running_sum_model, tile, scalar=False), (Obj("in"), Obj("out"), Buf("total"))
            ),
            Release("in"),
            Release("out"),
        ),
        buffers=(LocalBuffer("total", tile, "i32", initial_value=initial_value),),
    )


def with_fifo(design, name, **changes):
    """`design` with fifo `name` changed."""
    fifos = tuple(attrs.evolve(f, **changes) if f.name == name else f for f in design.fifos)
    return attrs.evolve(design, fifos=fifos)
