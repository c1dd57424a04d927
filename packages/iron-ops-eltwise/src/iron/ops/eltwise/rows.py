"""Designs of the row operators (RMSNorm, LayerNorm, Softmax, RoPE) and the
numpy models of the mlir-aie kernels they link.

A row operator runs on num_aie_columns x num_channels cores, core k taking
the k-th contiguous share of the rows; it calls its kernel once per row (a
row is one object of its x and y fifos). A vector every core needs (RMSNorm's
weight) is read from DDR once and broadcast by a memtile to every core,
which holds it across all its rows. RoPE's angle rows stream beside x: one
angle row is held while the rows/angle_rows consecutive rows it serves pass.

Kernel models follow the C++ of mlir-aie's `aie_kernels` as read at these
mlir-aie commits (the files changed over 2025-2026, some perhaps after
iron-design's pinned mlir-aie; a model is only as current as the source it
was read from): aie2/rms_norm.cc 81a47f7, aie2p/rms_norm.cc cbeca7f,
aie2/layer_norm.cc 1884eeb, aie2p/layer_norm.cc 08c7911, aie2/softmax.cc
1351c7a, aie2p/softmax.cc ad4f674, generic/rope.cc 06f23a4. Each has bf16
loads, float32 accumulators, and a bf16 store per vector conversion, which
rounds by the core's rounding mode. A core boots in floor and only some
kernels set conv_even, so every worker here calls our
`iron_set_rounding_conv_even` (kernels/rows.cc) before its kernels: each
conversion then rounds to nearest even, as a C++ scalar `(bfloat16)` cast
does. The cores' `invsqrt`, `inv`, `exp2` and lookup-table exp are
approximations whose exact bits are not published; the models use the
float32 functions in their place, and the operators' tolerances are
measured against float64 formulas (see the README).
"""

from __future__ import annotations

import functools

import numpy as np

from iron.core import IN, OUT, Device, OperatorError, bf16
from iron.design import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    Kernel,
    LocalBuffer,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    Release,
    Scalar,
    Tensor,
    Tile,
    Worker,
    aie_kernels,
    core,
    forward,
    memtile,
    shim,
    shipped,
)
from iron.ops.eltwise.line_kernels import mul_model, shipped_kernel

#: the epsilon mlir-aie's rms_norm and layer_norm kernels are compiled with
KERNEL_EPS = 1e-5
#: bf16 lanes per vector of each generation's row kernels (aie2: 256-bit
#: registers, 16 lanes; aie2p: 512-bit, 32), as the kernels instantiate them
LANES = {"aie2": 16, "aie2p": 32}
#: the first compute row (row 0 is the shim, row 1 the memtiles)
FIRST_CORE_ROW = 2


# ---- arithmetic helpers -----------------------------------------------------------


def to_bf16(values) -> np.ndarray:
    """float32 -> bf16, rounded to nearest even (conv_even, and a C++ cast)."""
    return np.asarray(values, np.float32).astype(bf16)


def cast_bf16(value) -> np.float32:
    """A scalar rounded to bf16, held as float32 (a bf16 broadcast operand)."""
    return np.float32(to_bf16(value))


def _f32(values) -> np.ndarray:
    return np.asarray(values).astype(np.float32)


def _lane_sum(values: np.ndarray, lanes: int) -> np.float32:
    """A float32 sum as the kernels reduce it: `lanes` running sums, then
    the lanes added (aie::reduce_add)."""
    whole = len(values) // lanes * lanes
    per_lane = np.zeros(lanes, np.float32)
    for chunk in values[:whole].reshape(-1, lanes):
        per_lane += chunk
    return np.float32(per_lane.sum(dtype=np.float32) + values[whole:].sum(dtype=np.float32))


# ---- kernel models (write their outputs in place, as the C++ does) ------------------


def set_rounding_model() -> None:
    """iron_set_rounding_conv_even moves no data; the models round as it sets."""


def rms_norm_model(arch: str, x, y, cols) -> None:
    """mlir-aie `rms_norm` (aie_kernels/{arch}/rms_norm.cc), eps 1e-5: the
    float32 inverse of the root mean square. aie2 scales by it split into a
    bf16 pair (x * hi + x * lo in float32): one rounding per output; aie2p
    rounds it to bf16 first, then rounds each product."""
    lanes = 32 if arch == "aie2" else 16
    v = _f32(x[:cols])
    mean_square = np.float32(_lane_sum(v * v, lanes) / np.float32(cols))
    inverse = np.float32(1) / np.sqrt(mean_square + np.float32(KERNEL_EPS))
    whole = cols // lanes * lanes
    if arch == "aie2":
        hi = cast_bf16(inverse)
        lo = cast_bf16(inverse - hi)
        y[:whole] = to_bf16(v[:whole] * hi + v[:whole] * lo)
    else:
        y[:whole] = to_bf16(v[:whole] * cast_bf16(inverse))
    y[whole:cols] = to_bf16(v[whole:] * inverse)  # the scalar tail


def layer_norm_model(arch: str, x, y, *sizes) -> None:
    """mlir-aie `layer_norm` (aie_kernels/{arch}/layer_norm.cc), eps 1e-5,
    no affine. aie2's kernel normalises each column of a (rows, cols) block
    with Welford's running mean; the design calls it on one row as a
    (cols, 1) block. aie2p's takes a row: float32 sums of x and x^2, variance
    E[x^2] - mean^2. Both then subtract the bf16 mean and multiply by the
    bf16 inverse deviation as bf16 vectors, rounding each step."""
    cols = sizes[0]
    v = _f32(x[:cols])
    if arch == "aie2":
        mean, m2 = np.float32(0), np.float32(0)
        for count, value in enumerate(v, start=1):
            delta = value - mean
            mean = np.float32(mean + delta / np.float32(count))
            m2 = np.float32(m2 + delta * (value - mean))
        variance = np.float32(m2 / np.float32(cols))
    else:
        mean = np.float32(_lane_sum(v, 32) / np.float32(cols))
        variance = np.float32(_lane_sum(v * v, 32) / np.float32(cols) - mean * mean)
    inverse = np.float32(1) / np.sqrt(variance + np.float32(KERNEL_EPS))
    centred = to_bf16(v - cast_bf16(mean))
    y[:cols] = to_bf16(_f32(centred) * cast_bf16(inverse))


#: the kernels' log2(e) as a bf16 constant (aie2p softmax.cc)
LOG2E_BF16 = np.float32(1.4453125)


def softmax_model(arch: str, x, y, valid) -> None:
    """mlir-aie `softmax_bf16` (aie_kernels/{arch}/softmax.cc) over the first
    `valid` elements, whole vectors only; it writes nothing past them.
    aie2: exp by lookup table, with no max subtracted; aie2p: exp2 of
    x * log2e (log2e a bf16 constant, 1.4453125) less the largest scaled
    value (at least 0). Both sum the bf16 exponentials in float32 and scale
    them by the bf16 inverse of the sum."""
    lanes = LANES[arch]
    if valid % lanes:
        raise ValueError(
            f"softmax_bf16 walks whole {lanes}-element vectors; valid={valid} leaves a "
            "partial vector unprocessed"
        )
    v = _f32(x[:valid])
    with np.errstate(over="ignore"):  # past 88.7 the kernel's exp is inf too
        if arch == "aie2":
            exps = to_bf16(np.exp(v.astype(np.float64)))
        else:
            scaled = v * LOG2E_BF16  # exact: a product of two bf16 values
            top = max(np.float32(0), _f32(to_bf16(scaled)).max())
            exps = to_bf16(np.exp2((scaled - top).astype(np.float64)))
    inverse = cast_bf16(np.float32(1) / _lane_sum(_f32(exps), lanes))
    y[:valid] = to_bf16(_f32(exps) * inverse)


def zero_model(y, n) -> None:
    """iron_zero_bf16: the row set to +0."""
    y[:n] = 0


def rope_model(method: str, x, angles, y, cols) -> None:
    """mlir-aie `rope` / `rope_two_halves` (aie_kernels/generic/rope.cc,
    built for either generation): each output is x1 cos -/+ x2 sin held in
    a float32 accumulator (the bf16 products are exact), rounded once."""
    v, a = _f32(x[:cols]), _f32(angles[:cols])
    cos, sin = a[0::2], a[1::2]
    if method == "two_halves":
        x1, x2 = v[: cols // 2], v[cols // 2 :]
        y[: cols // 2] = to_bf16(x1 * cos - x2 * sin)
        y[cols // 2 : cols] = to_bf16(x2 * cos + x1 * sin)
    else:
        x1, x2 = v[0::2], v[1::2]
        y[0:cols:2] = to_bf16(x1 * cos - x2 * sin)
        y[1:cols:2] = to_bf16(x1 * sin + x2 * cos)


# ---- kernels ---------------------------------------------------------------------


def _row(cols: int) -> Memref:
    return Memref((cols,), "bf16")


#: our helpers (kernels/rows.cc): setting the rounding mode and zeroing a row
ROW_HELPERS = shipped("iron.ops.eltwise", "kernels/rows.cc")

#: iron_set_rounding_conv_even()
SET_ROUNDING = Kernel("iron_set_rounding_conv_even", (), ROW_HELPERS, set_rounding_model)


def rms_norm_kernel(arch: str, cols: int) -> Kernel:
    """rms_norm(bf16 *input, bf16 *output, int32 cols)."""
    row = _row(cols)
    return Kernel(
        "rms_norm",
        (row, row, Scalar("i32")),
        aie_kernels("{arch}/rms_norm.cc"),
        functools.partial(rms_norm_model, arch),
    )


def mul_kernel(cols: int) -> Kernel:
    """iron_mul_bf16(bf16 *a, bf16 *b, bf16 *y, int32 n), shipped with the
    family (kernels/eltwise.cc): mlir-aie's sized multiply is newer than
    iron-design's pinned tree."""
    return shipped_kernel("iron_mul_bf16", 2, cols, 0, mul_model)


def layer_norm_kernel(arch: str, cols: int) -> Kernel:
    """aie2: layer_norm(bf16 *input, bf16 *output, int32 rows, int32 cols);
    aie2p: layer_norm(bf16 *input, bf16 *output, int32 cols)."""
    row = _row(cols)
    scalars = (Scalar("i32"),) * (2 if arch == "aie2" else 1)
    return Kernel(
        "layer_norm",
        (row, row, *scalars),
        aie_kernels("{arch}/layer_norm.cc"),
        functools.partial(layer_norm_model, arch),
    )


def softmax_kernel(arch: str, cols: int) -> Kernel:
    """softmax_bf16(bf16 *input, bf16 *output, int32 input_size)."""
    row = _row(cols)
    return Kernel(
        "softmax_bf16",
        (row, row, Scalar("i32")),
        aie_kernels("{arch}/softmax.cc"),
        functools.partial(softmax_model, arch),
    )


def zero_kernel(cols: int) -> Kernel:
    """iron_zero_bf16(bf16 *y, int32 n) (kernels/rows.cc)."""
    return Kernel("iron_zero_bf16", (_row(cols), Scalar("i32")), ROW_HELPERS, zero_model)


def rope_kernel(method: str, cols: int) -> Kernel:
    """rope / rope_two_halves(bf16 *input, bf16 *lut, bf16 *output, int32 dims)."""
    row = _row(cols)
    return Kernel(
        "rope_two_halves" if method == "two_halves" else "rope",
        (row, row, row, Scalar("i32")),
        aie_kernels("generic/rope.cc"),
        functools.partial(rope_model, method),
    )


def require_design(operator: str, parameter: str, value, ok: bool, rule: str) -> None:
    """A rule the design's kernel sets (not the operator's shape rules)."""
    if not ok:
        raise OperatorError(f"{operator}: {parameter}={value!r}: {rule}")


# ---- the design --------------------------------------------------------------------


def row_design(
    name: str,
    device: Device,
    rows: int,
    cols: int,
    columns: int,
    channels: int,
    per_row,
    *,
    who: tuple[str, str],
    weight: bool = False,
    angle_rows: int | None = None,
    params: tuple[str, ...] = (),
    buffers: tuple[LocalBuffer, ...] = (),
) -> Design:
    """`rows` rows of `cols` bf16 over columns x channels cores. `per_row(k)`
    gives core k's ops for one row, between acquiring x{k}, y{k} (and
    holding w, a{k}) and releasing x{k}, y{k}. `weight`: a (cols,) tensor
    broadcast to every core through a memtile, acquired once per run.
    `who` (operator, parameter) names the row length in a refusal.
    `angle_rows`: an (angle_rows, cols) tensor streamed to each core beside
    its rows, one angle row held for rows/angle_rows consecutive rows."""
    cores = columns * channels
    share = rows // cores
    # two objects each of x and y (and the angles) double-buffer a row; past
    # 4096 elements (four 16 KiB rows and the stack exceed a core's 64 KiB)
    # they take one
    depth = 2 if cols <= 4096 else 1
    row_objects = depth * (3 if angle_rows is not None else 2) + int(weight) + len(buffers)
    operator, parameter = who
    held = device.core_stack_bytes + row_objects * cols * 2
    require_design(
        operator, parameter, cols, held <= device.core_bytes,
        f"{row_objects} rows of {cols} bf16 and the {device.core_stack_bytes}-byte stack "
        f"take {held} bytes of a core's {device.core_bytes}",
    )  # fmt: skip
    tensors = [Tensor("x", (rows, cols), "bf16", IN)]
    fifos, workers, fills, drains, links = [], [], [], [], []
    if weight:
        tensors.append(Tensor("weight", (cols,), "bf16", IN))
        everyone = tuple(core(f"core{k}") for k in range(cores))
        fifos += [
            ObjectFifo("weight_in", (cols,), "bf16", shim(), (memtile("broadcast"),), depth=1),
            ObjectFifo("w", (cols,), "bf16", memtile("broadcast"), everyone, depth=1),
        ]
        links.append(forward("broadcast", "weight_in", "w"))
        fills.append(Fill("weight_in", "weight", TAP.linear(cols)))
    if angle_rows is not None:
        tensors.append(Tensor("angles", (angle_rows, cols), "bf16", IN))
    tensors.append(Tensor("y", (rows, cols), "bf16", OUT))
    for k in range(cores):
        column, channel = divmod(k, channels)
        x, y, worker = f"x{k}", f"y{k}", f"core{k}"
        fifos += [
            ObjectFifo(x, (cols,), "bf16", shim(), (core(worker),), depth=depth),
            ObjectFifo(y, (cols,), "bf16", core(worker), (shim(),), depth=depth),
        ]
        # conv_even before every row's kernels: once per row, not once per run,
        # because an idle forever worker must wait at the top of its body; the
        # call writes one control register
        rounding = Call(SET_ROUNDING, ())
        row_ops = (Acquire(x), Acquire(y), rounding, *per_row(k), Release(x), Release(y))
        fills.append(Fill(x, "x", TAP.linear(share * cols, k * share * cols)))
        drains.append(Drain(y, "y", TAP.linear(share * cols, k * share * cols), wait=True))
        if angle_rows is None:
            body = (Loop(share, row_ops),)
        else:
            a, angle_share = f"a{k}", angle_rows // cores
            fifos.append(ObjectFifo(a, (cols,), "bf16", shim(), (core(worker),), depth=depth))
            fills.append(Fill(a, "angles", TAP.linear(angle_share * cols, k * angle_share * cols)))
            body = (
                Loop(angle_share, (Acquire(a), Loop(share // angle_share, row_ops), Release(a))),
            )
        if weight:
            body = (Acquire("w"), *body, Release("w"))
        tile = Tile(column, FIRST_CORE_ROW + channel)
        workers.append(Worker(worker, body, tile=tile, buffers=buffers))
    return Design(
        name,
        device,
        tuple(tensors),
        tuple(fifos),
        tuple(workers),
        (*fills, *drains),
        tuple(links),
        params,
    )


def rms_norm(tile_size, rows, weighted, eps, columns, channels, device) -> Design:
    arch = device.arch
    require_design(
        "RMSNorm", "eps", eps, eps == KERNEL_EPS,
        f"{KERNEL_EPS:g} (mlir-aie's rms_norm kernel is compiled with it)",
    )  # fmt: skip
    norm = rms_norm_kernel(arch, tile_size)
    if not weighted:
        return row_design(
            "rms_norm", device, rows, tile_size, columns, channels,
            lambda k: (Call(norm, (Obj(f"x{k}"), Obj(f"y{k}"), tile_size)),),
            who=("RMSNorm", "tile_size"),
        )  # fmt: skip
    mul = mul_kernel(tile_size)
    return row_design(
        "rms_norm_weighted", device, rows, tile_size, columns, channels,
        lambda k: (
            Call(norm, (Obj(f"x{k}"), Buf("normed"), tile_size)),
            Call(mul, (Buf("normed"), Obj("w"), Obj(f"y{k}"), tile_size)),
        ),
        who=("RMSNorm", "tile_size"),
        weight=True,
        buffers=(LocalBuffer("normed", (tile_size,), "bf16"),),
    )  # fmt: skip


def layer_norm(rows, cols, eps, columns, channels, device) -> Design:
    arch = device.arch
    require_design(
        "LayerNorm", "eps", eps, eps == KERNEL_EPS,
        f"{KERNEL_EPS:g} (mlir-aie's layer_norm kernel is compiled with it)",
    )  # fmt: skip
    lanes = LANES[arch]
    require_design(
        "LayerNorm", "cols", cols, cols % lanes == 0,
        f"a multiple of {lanes} on {arch} (mlir-aie's layer_norm walks whole "
        f"{lanes}-element vectors)",
    )  # fmt: skip
    kernel = layer_norm_kernel(arch, cols)
    sizes = (cols, 1) if arch == "aie2" else (cols,)  # aie2: one row as a (cols, 1) block
    return row_design(
        "layer_norm", device, rows, cols, columns, channels,
        lambda k: (Call(kernel, (Obj(f"x{k}"), Obj(f"y{k}"), *sizes)),),
        who=("LayerNorm", "cols"),
    )  # fmt: skip


def softmax(rows, cols, columns, channels, device) -> Design:
    arch = device.arch
    lanes = LANES[arch]
    require_design(
        "Softmax", "cols", cols, cols % lanes == 0,
        f"a multiple of {lanes} on {arch} (mlir-aie's softmax_bf16 walks whole "
        f"{lanes}-element vectors)",
    )  # fmt: skip
    kernel, zero = softmax_kernel(arch, cols), zero_kernel(cols)
    # softmax_bf16 writes the first `valid` columns only: the row is zeroed first
    return row_design(
        "softmax", device, rows, cols, columns, channels,
        lambda k: (
            Call(zero, (Obj(f"y{k}"), cols)),
            Call(kernel, (Obj(f"x{k}"), Obj(f"y{k}"), Param("valid"))),
        ),
        who=("Softmax", "cols"),
        params=("valid",),
    )  # fmt: skip


def rope(rows, cols, angle_rows, method, columns, channels, device) -> Design:
    kernel = rope_kernel(method, cols)
    return row_design(
        "rope", device, rows, cols, columns, channels,
        lambda k: (Call(kernel, (Obj(f"x{k}"), Obj(f"a{k}"), Obj(f"y{k}"), cols)),),
        who=("RoPE", "cols"),
        angle_rows=angle_rows,
    )  # fmt: skip
