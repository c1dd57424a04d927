"""The streaming design the elementwise, activation and dequant operators
share: the work split into num_aie_columns x num_channels equal contiguous
blocks, one core per block (column c, row 2 + channel), each streaming its
block one line at a time through depth-2 object fifos from the shim and
back, calling the kernel once per line.

Shim ends are left to the placer, which moves a stream to the next column's
shim once a column's two DMA channels each way are taken: that is how two
channels of a binary operator (four input streams per column) fit, and why
the operators' shim budget counts streams across the whole device.
"""

from __future__ import annotations

import attrs

from iron.core import IN, OUT, Device
from iron.design import (
    TAP,
    Acquire,
    Call,
    Design,
    Drain,
    Fill,
    Kernel,
    Obj,
    ObjectFifo,
    Release,
    Scalar,
    Tensor,
    Tile,
    Worker,
    core,
    shim,
)
from iron.ops.eltwise.line_kernels import rounding_prologue

#: rows 0 and 1 are the shim and the memtile; cores start at row 2
FIRST_CORE_ROW = 2


@attrs.frozen
class Stream:
    """A runtime tensor moved one `line` of elements per kernel call."""

    tensor: str
    line: int
    dtype: str = "bf16"


def streaming_design(
    name: str,
    device: Device,
    *,
    inputs: tuple[Stream, ...],
    output: Stream,
    lines: int,
    columns: int,
    channels: int,
    kernel: Kernel,
    scalars: tuple = (),
) -> Design:
    """`lines` lines of every stream, split evenly over columns x channels
    cores; each core calls ``kernel(*input objects, output object,
    *scalars)`` once per line (after setting conv_even before an mlir-aie
    kernel, which leaves the core's mode as it finds it)."""
    cores = columns * channels
    per_core = lines // cores
    streams = (*inputs, output)
    tensors = tuple(
        Tensor(s.tensor, (lines * s.line,), s.dtype, OUT if s is output else IN) for s in streams
    )
    fifos, workers, fills, drains = [], [], [], []
    for col in range(columns):
        for channel in range(channels):
            k = col * channels + channel
            worker = f"core{k}"
            ins = [f"{s.tensor}{k}" for s in inputs]
            out = f"{output.tensor}{k}"
            fifos += [
                ObjectFifo(f, s.line, s.dtype, shim(), (core(worker),), depth=2)
                for f, s in zip(ins, inputs)
            ]
            fifos.append(ObjectFifo(out, output.line, output.dtype, core(worker), (shim(),)))
            workers.append(
                Worker(
                    worker,
                    (
                        *(Acquire(f) for f in ins),
                        Acquire(out),
                        *rounding_prologue(kernel),
                        Call(kernel, (*(Obj(f) for f in ins), Obj(out), *scalars)),
                        *(Release(f) for f in ins),
                        Release(out),
                    ),
                    tile=Tile(col, FIRST_CORE_ROW + channel),
                )
            )
            fills += [
                Fill(f, s.tensor, TAP.linear(per_core * s.line, k * per_core * s.line))
                for f, s in zip(ins, inputs)
            ]
            block = per_core * output.line
            drains.append(Drain(out, output.tensor, TAP.linear(block, k * block), wait=True))
    return Design(name, device, tensors, fifos, workers, (*fills, *drains))


def elementwise_design(
    name: str,
    device: Device,
    tensors: str,
    *,
    size: int,
    tile: int,
    columns: int,
    channels: int,
    kernel: Kernel,
    extra: tuple = (),
) -> Design:
    """A flat bf16 operator over `size` elements: `tensors` names its runtime
    buffers in argument order, the last one the output. The kernel gets the
    line length when it takes one (a scalar beyond the `extra` ones)."""
    *inputs, output = (Stream(t, tile) for t in tensors.split())
    scalars = sum(isinstance(a, Scalar) for a in kernel.args)
    count = (tile,) if scalars > len(extra) else ()
    return streaming_design(
        name,
        device,
        inputs=tuple(inputs),
        output=output,
        lines=size // tile,
        columns=columns,
        channels=channels,
        kernel=kernel,
        scalars=(*count, *extra),
    )
