"""Designs of the row operators (RMSNorm, LayerNorm, Softmax, RoPE) and the
numpy models of the kernels they link.

A row operator runs on num_aie_columns x num_channels cores, core k taking
the k-th contiguous share of the rows; it calls its kernel once per row (a
row is one object of its x and y fifos). A vector every core needs (RMSNorm's
weight) is read from DDR once and broadcast by a memtile to every core,
which holds it across all its rows. RoPE's angle rows stream beside x: one
angle row is held while the rows/angle_rows consecutive rows it serves pass.

The kernels (listed in ``kernels/manifest.json``):

- npu2 (aie2p): mlir-aie's `rms_norm` (aie2p/rms_norm.cc), `layer_norm`
  (aie2p/layer_norm.cc) and `softmax_bf16` (aie2p/softmax.cc) at iron-design's
  pin; npu1 (aie2): mlir-aie's `softmax_bf16` (aie2/softmax.cc, with the
  exp tables of lut_based_ops) and ours for the norms (kernels/norm.cc),
  which the pin lacks; ours on npu2 too for an eps other than the 1e-5
  mlir-aie's norms compile in;
- RoPE on both: ours (kernels/rope.cc): the pin has no aie2 rope, and its
  aie2p `rope` rounds each product to bf16 before their difference.

The models follow those sources: bf16 loads, float32 lanes, the order the
lanes are added in, and a bf16 rounding wherever the C++ stores or
converts to bf16. A core boots in floor and mlir-aie's row kernels never
set the mode, so every worker here calls `iron_set_rounding_conv_even`
(kernels/rows.cc) before them: each conversion rounds to nearest even. The
cores' `invsqrt`, `inv`, `exp2` and aie2's lookup-table exp are
approximations whose exact bits are not published; the models use the
float32 functions in their place, and the operators' tolerances are
measured against float64 formulas (see the README).
"""

from __future__ import annotations

import functools

import ml_dtypes
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
from iron.ops.eltwise.line_kernels import (
    ROW_HELPERS,
    SET_ROUNDING,
    aie2_lut_tables,
    mul_model,
    shipped_kernel,
)

#: the epsilon mlir-aie's aie2p rms_norm and layer_norm compile in
#: (``constexpr float epsilon = 1e-5f``); ours (kernels/norm.cc) take any
MLIR_AIE_NORM_EPS = 1e-5
#: float32 lanes a row kernel's vectors have: the norms 16 on both
#: generations (aie2p/rms_norm.cc and layer_norm.cc instantiate N = 16; ours
#: too); softmax_bf16 16 on aie2, 32 on aie2p (SM_VEC_LEN)
NORM_LANES = 16
SOFTMAX_LANES = {"aie2": 16, "aie2p": 32}
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


def lane_sums(values: np.ndarray, lanes: int) -> np.ndarray:
    """The float32 running sum of each of `lanes` lanes over whole vectors
    (a vector add per step: one rounding per lane per step)."""
    per_lane = np.zeros(lanes, np.float32)
    for chunk in values[: len(values) // lanes * lanes].reshape(-1, lanes):
        per_lane += chunk
    return per_lane


def sum_lanes(lanes: np.ndarray) -> np.ndarray:
    """The float32 lanes on the last axis added pairwise by halves, lane k
    with k + width/2 (our kernels' `iron::sum_lanes`; mlir-aie's kernels
    call aie::reduce_add, whose order is not published and is modelled the
    same)."""
    lanes = np.asarray(lanes, np.float32)
    while lanes.shape[-1] > 1:
        half = lanes.shape[-1] // 2
        lanes = lanes[..., :half] + lanes[..., half:]
    return lanes[..., 0]


def _tail_sum(start: np.float32, values: np.ndarray) -> np.float32:
    """`values` added one by one to `start` (a kernel's scalar tail)."""
    total = np.float32(start)
    for v in values:
        total = np.float32(total + v)
    return total


# ---- kernel models (write their outputs in place, as the C++ does) ------------------


def rms_norm_model(source: str, x, y, cols, *, eps=MLIR_AIE_NORM_EPS) -> None:
    """Squares summed in 16 float32 lanes (the tail after them, one by
    one), the float32 inverse of the root mean square with `eps` added.
    `source` "iron" (ours, iron_rms_norm_bf16): x * inverse rounded once
    (through the inverse's bf16 parts). "mlir-aie" (aie2p rms_norm, eps
    1e-5): the inverse rounded to bf16, then each product rounded; the
    scalar tail multiplies by the float32 inverse."""
    v = _f32(x[:cols])
    whole = cols // NORM_LANES * NORM_LANES
    total = _tail_sum(sum_lanes(lane_sums(v * v, NORM_LANES)), v[whole:] * v[whole:])
    inverse = np.float32(1) / np.sqrt(np.float32(total / np.float32(cols)) + np.float32(eps))
    if source == "iron":
        y[:cols] = to_bf16(v * inverse)
    else:
        y[:whole] = to_bf16(v[:whole] * cast_bf16(inverse))
        y[whole:cols] = to_bf16(v[whole:] * inverse)


def layer_norm_model(source: str, x, y, cols, *, eps=MLIR_AIE_NORM_EPS) -> None:
    """No affine; float32 lane sums of x and x^2 (16 lanes), variance
    E[x^2] - mean^2, `eps` added. `source` "iron" (ours,
    iron_layer_norm_bf16): the variance at least 0, then x * inverse - mean *
    inverse in float32, rounded once. "mlir-aie" (aie2p layer_norm, eps
    1e-5): x - bf16(mean) as bf16, times bf16(inverse) as bf16."""
    v = _f32(x[:cols])
    mean = np.float32(sum_lanes(lane_sums(v, NORM_LANES)) / np.float32(cols))
    variance = np.float32(sum_lanes(lane_sums(v * v, NORM_LANES)) / np.float32(cols) - mean * mean)
    if source == "iron":
        variance = max(variance, np.float32(0))
    inverse = np.float32(1) / np.sqrt(variance + np.float32(eps))
    if source == "iron":
        y[:cols] = to_bf16(v * inverse - np.float32(mean * inverse))
    else:
        centred = to_bf16(v - cast_bf16(mean))
        y[:cols] = to_bf16(_f32(centred) * cast_bf16(inverse))


#: aie2p softmax.cc's log2(e), a bf16 constant (`#define log2e 1.4453125`), and
#: the value its running maximum starts from ((bfloat16)-32768.0f)
LOG2E_BF16 = np.float32(1.4453125)
SOFTMAX_MAX_START = np.float32(-32768.0)


def softmax_model(arch: str, x, y, valid) -> None:
    """mlir-aie `softmax_bf16` (aie_kernels/{arch}/softmax.cc) over the first
    `valid` elements, whole vectors only; it writes nothing past them.
    aie2: exp by lookup table (modelled as exp rounded to bf16), with no max
    subtracted; aie2p: exp2 of x * log2e (log2e a bf16 constant, 1.4453125;
    the product in float32) less the largest product rounded to bf16 (at
    least -32768), the exp2 stored as bf16. Both sum the bf16 exponentials
    in float32 lanes, add the lanes, and scale by the bf16 inverse of the sum."""
    lanes = SOFTMAX_LANES[arch]
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
            top = max(SOFTMAX_MAX_START, _f32(to_bf16(scaled)).max())
            exps = to_bf16(np.exp2((scaled - top).astype(np.float64)))
    inverse = cast_bf16(np.float32(1) / sum_lanes(lane_sums(_f32(exps), lanes)))
    y[:valid] = to_bf16(_f32(exps) * inverse)


#: the most negative finite bf16: its exp underflows to exactly 0 on both
#: generations (aie2's table and aie2p's exp2 of a float32 -inf)
MASKED = ml_dtypes.finfo(bf16).min


def mask_tail_model(x, valid, n) -> None:
    """iron_mask_tail_bf16: x[valid:n] set to the most negative bf16."""
    x[valid:n] = MASKED


def rope_model(method: str, x, angles, y, cols) -> None:
    """iron_rope_{interleaved,two_halves}_bf16 (kernels/rope.cc): each output
    is x1 cos -/+ x2 sin held in the float32 accumulator (the bf16 products
    are exact), rounded once."""
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


#: our aie2 norms (the pin has aie2p's only)
def norm_source(eps: float):
    """Our norms' source (kernels/norm.cc), its object compiled for `eps`."""
    define = () if eps == MLIR_AIE_NORM_EPS else (f"IRON_NORM_EPS={float(eps)!r}f",)
    return shipped("iron.ops.eltwise", "kernels/norm.cc", defines=define)


def _norm_kernel(name: str, arch: str, cols: int, eps: float, model) -> Kernel:
    """(bf16 *input, bf16 *output, int32 cols): mlir-aie's `name` on aie2p
    at its eps, ours `iron_{name}_bf16` otherwise (aie2, or another eps)."""
    row = _row(cols)
    if arch == "aie2p" and eps == MLIR_AIE_NORM_EPS:
        symbol, source, implementation = name, aie_kernels(f"aie2p/{name}.cc"), "mlir-aie"
    else:
        symbol, source, implementation = f"iron_{name}_bf16", norm_source(eps), "iron"
    return Kernel(
        symbol,
        (row, row, Scalar("i32")),
        source,
        functools.partial(model, implementation, eps=float(eps)),
    )


def rms_norm_kernel(arch: str, cols: int, eps: float = MLIR_AIE_NORM_EPS) -> Kernel:
    return _norm_kernel("rms_norm", arch, cols, eps, rms_norm_model)


def layer_norm_kernel(arch: str, cols: int, eps: float = MLIR_AIE_NORM_EPS) -> Kernel:
    return _norm_kernel("layer_norm", arch, cols, eps, layer_norm_model)


def mul_kernel(cols: int) -> Kernel:
    """iron_mul_bf16(bf16 *a, bf16 *b, bf16 *y, int32 n), shipped with the
    family (kernels/eltwise.cc): the pin has no sized multiply."""
    return shipped_kernel("iron_mul_bf16", 2, cols, 0, mul_model)


def softmax_kernel(arch: str, cols: int) -> Kernel:
    """softmax_bf16(bf16 *input, bf16 *output, int32 input_size). aie2's
    includes lut_based_ops.h and reads its exp tables: the object links
    lut_based_ops.cpp, as mlir-aie's softmax factory builds it."""
    row = _row(cols)
    tables = aie2_lut_tables() if arch == "aie2" else {}
    return Kernel(
        "softmax_bf16",
        (row, row, Scalar("i32")),
        aie_kernels(f"{arch}/softmax.cc", **tables),
        functools.partial(softmax_model, arch),
    )


def mask_tail_kernel(cols: int) -> Kernel:
    """iron_mask_tail_bf16(bf16 *x, int32 valid, int32 n) (kernels/rows.cc)."""
    return Kernel(
        "iron_mask_tail_bf16", (_row(cols), Scalar("i32"), Scalar("i32")), ROW_HELPERS,
        mask_tail_model,
    )  # fmt: skip


def rope_kernel(method: str, cols: int) -> Kernel:
    """iron_rope_{interleaved,two_halves}_bf16(bf16 *x, bf16 *angles, bf16 *y,
    int32 cols) (kernels/rope.cc)."""
    row = _row(cols)
    return Kernel(
        f"iron_rope_{method}_bf16",
        (row, row, row, Scalar("i32")),
        shipped("iron.ops.eltwise", "kernels/rope.cc"),
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
    params: tuple[Param, ...] = (),
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
    norm = rms_norm_kernel(arch, tile_size, eps)
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
    kernel = layer_norm_kernel(arch, cols, eps)
    require_design(
        "LayerNorm", "cols", cols, cols % NORM_LANES == 0,
        f"a multiple of {NORM_LANES} ({kernel.symbol} walks whole {NORM_LANES}-element vectors)",
    )  # fmt: skip
    return row_design(
        "layer_norm", device, rows, cols, columns, channels,
        lambda k: (Call(kernel, (Obj(f"x{k}"), Obj(f"y{k}"), cols)),),
        who=("LayerNorm", "cols"),
    )  # fmt: skip


def softmax(rows, cols, columns, channels, device) -> Design:
    arch = device.arch
    lanes = SOFTMAX_LANES[arch]
    require_design(
        "Softmax", "cols", cols, cols % lanes == 0,
        f"a multiple of {lanes} on {arch} (mlir-aie's softmax_bf16 walks whole "
        f"{lanes}-element vectors)",
    )  # fmt: skip
    kernel, mask = softmax_kernel(arch, cols), mask_tail_kernel(cols)
    # softmax_bf16 walks whole vectors, and `valid` (a decode step's context
    # length) is any count: the columns past it are masked to a value whose
    # exp is 0, so the kernel runs over the whole row and writes exact zeros there
    return row_design(
        "softmax", device, rows, cols, columns, channels,
        lambda k: (
            Call(mask, (Obj(f"x{k}"), Param("valid"), cols)),
            Call(kernel, (Obj(f"x{k}"), Obj(f"y{k}"), cols)),
        ),
        who=("Softmax", "cols"),
        params=(Param("valid", member="valid"),),
    )  # fmt: skip


def rope(rows, cols, angle_rows, method, columns, channels, device) -> Design:
    kernel = rope_kernel(method, cols)
    return row_design(
        "rope", device, rows, cols, columns, channels,
        lambda k: (Call(kernel, (Obj(f"x{k}"), Obj(f"a{k}"), Obj(f"y{k}"), cols)),),
        who=("RoPE", "cols"),
        angle_rows=angle_rows,
    )  # fmt: skip
