"""The core kernels the streaming designs link, each with a numpy model of
its arithmetic: bf16 in, float32 inside, a rounding to bf16 wherever the C++
stores a bf16 value. A model writes its output view in place, as the kernel
does (`iron.design.Kernel`).

Two sources:

- mlir-aie's `aie_kernels/{aie2,aie2p}` tree (Xilinx/mlir-aie, 2026): `eltwise_add_bf16_vector` (add.cc), `eltwise_mul_bf16_vector`
  (mul.cc) and `bf16_relu` (relu.cc) bake 1024 elements into their loop, so
  they serve 1024-element lines only; `tanh_bf16`, `sigmoid_bf16`,
  `gelu_bf16_size` and `silu_bf16_size` take the element count at run time
  and step 32 elements (`aie.iron.kernels.activation._RUNTIME_SIZED_LOOPS`).
  On aie2 the four activations read mlir-aie's tanh lookup table
  (`aie_runtime_lib/AIE2/lut_based_ops`), modelled here table and all; on
  aie2p they use the native `aie::tanh`, modelled as float32 tanh rounded to
  bf16. Either way the models keep every bf16 step of the C++ around it.
  Newer mlir-aie trees add sized add, mul and relu variants
  (`eltwise_mul_bf16_vector_size`, `relu_bf16_size` in aie2p), which could
  replace ours once iron-design's pin moves.
- `kernels/eltwise.cc`, shipped with this package: sized lines (any even
  count) of add, mul, ReLU, AXPY, LeakyReLU, Clamp and the unsigned int4
  dequant, which mlir-aie either lacks or fixes at 1024 elements (its
  `expand_int4_to_bfloat16` also reads signed codes). Float scalars reach
  them as the int32 bits of a float32, because a design passes kernel
  scalars as integers.

Where the C++ converts a float accumulator to bf16, the models round to
nearest even; the operators' tolerances also cover a core that truncates.
"""

from __future__ import annotations

import functools

import numpy as np

from iron.core import bf16
from iron.design import Kernel, Memref, Scalar, aie_kernels, shipped

#: the one line length mlir-aie's add, mul and relu kernels accept (the
#: loop bound is compiled in: add.cc, mul.cc, relu.cc; `aie.iron.kernels.eltwise`)
FIXED_LINE = 1024
SHIPPED = shipped("iron.ops.eltwise", "kernels/eltwise.cc")


def _round(x) -> np.ndarray:
    """float32 -> bf16 -> float32: one bf16 store."""
    return np.asarray(x, dtype=np.float32).astype(bf16).astype(np.float32)


def _f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def float_bits(value: float) -> int:
    """The int32 holding float32 `value`'s bits (how a float scalar reaches
    the shipped kernels)."""
    return int(np.array(value, dtype=np.float32).view(np.int32))


def bits_float(bits: int) -> np.float32:
    return np.array(bits, dtype=np.int32).view(np.float32)[()]


# ---- mlir-aie's aie2 tanh lookup table -------------------------------------------------

#: (slope, offset) of tanh on each quarter of [0, 4), as bf16 values, read
#: from mlir-aie `aie_runtime_lib/AIE2/lut_based_ops.cpp` (tanh_lut_ab); the
#: table there holds both halves, the negative one mirrored (odd symmetry)
_TANH_POSITIVE = (
    (1.0, 0.0),
    (0.8671875, 0.03076171875),
    (0.69140625, 0.11962890625),
    (0.50390625, 0.259765625),
    (0.34765625, 0.416015625),
    (0.2294921875, 0.5625),
    (0.1455078125, 0.6875),
    (0.091796875, 0.78125),
    (0.056396484375, 0.8515625),
    (0.035400390625, 0.8984375),
    (0.021240234375, 0.93359375),
    (0.0126953125, 0.95703125),
    (0.00750732421875, 0.97265625),
    (0.005096435546875, 0.98046875),
    (0.002838134765625, 0.98828125),
    (0.0, 1.0),
)
_TANH_SLOPE = np.array(
    [s for s, _ in reversed(_TANH_POSITIVE)] + [s for s, _ in _TANH_POSITIVE], np.float32
)
_TANH_OFFSET = np.array(
    [-o for _, o in reversed(_TANH_POSITIVE)] + [o for _, o in _TANH_POSITIVE], np.float32
)


def tanh_lut(x: np.ndarray) -> np.ndarray:
    """`getTanhBf16`: aie::linear_approx over 32 segments of width 1/4 on
    [-4, 4] (step_bits -2, bias 16), the index floored and saturated at both
    ends, slope * x + offset in the float accumulator, stored as bf16."""
    x = _f32(x)
    with np.errstate(invalid="ignore"):
        index = np.clip(np.floor(x * np.float32(4)), -16, 15).astype(np.int64) + 16
    index = np.where(np.isnan(x), 16, index)
    return _round(_TANH_SLOPE[index] * x + _TANH_OFFSET[index])


# ---- models ------------------------------------------------------------------------------


def add_model(a, b, y, n=FIXED_LINE):
    y[:n] = (_f32(a[:n]) + _f32(b[:n])).astype(bf16)


def mul_model(a, b, y, n=FIXED_LINE):
    y[:n] = (_f32(a[:n]) * _f32(b[:n])).astype(bf16)


def relu_model(x, y, n=FIXED_LINE):
    y[:n] = np.maximum(_f32(x[:n]), np.float32(0)).astype(bf16)


def axpy_model(x, y, out, n, factor_bits):
    factor = bits_float(factor_bits)
    out[:n] = (factor * _f32(x[:n]) + _f32(y[:n])).astype(bf16)


def leaky_relu_model(x, y, n, alpha_bits):
    v = _f32(x[:n])
    y[:n] = np.where(v >= 0, v, bits_float(alpha_bits) * v).astype(bf16)


def clamp_model(x, y, n, lo_bits, hi_bits):
    y[:n] = np.clip(_f32(x[:n]), bits_float(lo_bits), bits_float(hi_bits)).astype(bf16)


def dequant_model(packed, y, n, group):
    """One tile: n/2 bytes of codes (element 2k low nibble), then n/group
    little-endian bf16 scales; code * scale is exact in float32."""
    codes_bytes = packed[: n // 2]
    codes = np.stack([codes_bytes & 0x0F, codes_bytes >> 4], axis=-1).reshape(n)
    scales = np.ascontiguousarray(packed[n // 2 : n // 2 + n // group * 2]).view("<u2")
    scale = scales.astype(np.uint16).view(bf16).astype(np.float32)
    y[:n] = (codes.reshape(-1, group).astype(np.float32) * scale[:, None]).reshape(n).astype(bf16)


def tanh_native(x) -> np.ndarray:
    """aie2p's `aie::tanh<bfloat16>` on float lanes, stored as bf16; its own
    approximation error is not modelled (the aie2p tolerance covers it)."""
    return _round(np.tanh(_f32(x)))


def _tanh_of(arch: str):
    return tanh_lut if arch == "aie2" else tanh_native


def tanh_model(x, y, n, arch):
    y[:n] = _tanh_of(arch)(x[:n]).astype(bf16)


_HALF = np.float32(0.5)


def sigmoid_model(x, y, n, arch):
    """sigmoid.cc (both trees): 0.5 * (1 + tanh(x / 2)), the tanh, 1 + tanh
    and the result each stored as bf16."""
    t = _tanh_of(arch)(_f32(x[:n]) * _HALF)
    y[:n] = (_round(t + 1) * _HALF).astype(bf16)


def silu_model(x, y, n, arch):
    """silu.cc: the sigmoid 0.5 + 0.5 tanh(x / 2) in one multiply-add,
    stored as bf16, then max(x, -8) times it (the aie2p form taken is the
    native-tanh one)."""
    v = _f32(x[:n])
    gate = _round(_HALF + _tanh_of(arch)(v * _HALF) * _HALF)
    y[:n] = (np.maximum(v, np.float32(-8)) * gate).astype(bf16)


_BETA = _round(0.044715)
_SQRT_2_OVER_PI = _round(0.79788456)
#: aie2p gelu.cc folds beta into sqrt(2/pi): a bf16 times a float, stored as bf16
_SQRT_2_OVER_PI_BETA = _round(_SQRT_2_OVER_PI * np.float32(0.044715))


def gelu_model(x, y, n, arch):
    """gelu.cc, tanh form. aie2: x^2, x^3, 0.044715 x^3, x + that, times
    sqrt(2/pi), the table's tanh, 1 + tanh and 0.5 (1 + tanh) each stored as
    bf16, then times x. aie2p: x^2 and (sqrt(2/pi) 0.044715) x stored as bf16,
    inner = sqrt(2/pi) x + that product in the float accumulator, the native
    tanh, then 0.5 x + tanh * bf16(0.5 x) in one multiply-add."""
    v = _f32(x[:n])
    if arch == "aie2":
        cube = _round(v * _round(v * v))
        inner = _round(_round(v + _round(cube * _BETA)) * _SQRT_2_OVER_PI)
        half = _round(_round(tanh_lut(inner) + 1) * _HALF)
        y[:n] = (v * half).astype(bf16)
    else:
        inner = v * _SQRT_2_OVER_PI + _round(v * _SQRT_2_OVER_PI_BETA) * _round(v * v)
        half_x = v * _HALF
        y[:n] = (half_x + tanh_native(inner) * _round(half_x)).astype(bf16)


# ---- kernels -------------------------------------------------------------------------------


def _line(n: int, dtype: str = "bf16") -> Memref:
    return Memref((n,), dtype)


def binary_kernel(op: str, tile: int) -> Kernel:
    """add or mul of two lines: mlir-aie's for 1024-element lines, ours otherwise."""
    model = {"add": add_model, "mul": mul_model}[op]
    line = _line(tile)
    if tile == FIXED_LINE:
        return Kernel(
            f"eltwise_{op}_bf16_vector", (line,) * 3, aie_kernels(f"{{arch}}/{op}.cc"), model
        )
    return Kernel(f"iron_{op}_bf16", (line,) * 3 + (Scalar("i32"),), SHIPPED, model)


def relu_kernel(tile: int) -> Kernel:
    """max(x, 0) of a line: mlir-aie's for 1024-element lines, ours otherwise."""
    line = _line(tile)
    if tile == FIXED_LINE:
        return Kernel("bf16_relu", (line, line), aie_kernels("{arch}/relu.cc"), relu_model)
    return Kernel("iron_relu_bf16", (line, line, Scalar("i32")), SHIPPED, relu_model)


def shipped_kernel(symbol: str, inputs: int, tile: int, scalars: int, model) -> Kernel:
    """One of ours: `inputs` bf16 lines, an output line, the count, then
    `scalars` int32 words."""
    line = _line(tile)
    args = (line,) * (inputs + 1) + (Scalar("i32"),) * (1 + scalars)
    return Kernel(symbol, args, SHIPPED, model)


def dequant_kernel(tile: int, tile_bytes: int) -> Kernel:
    """(packed tile, output line, tile_size, group_size)."""
    return Kernel(
        "iron_dequant_u4_bf16",
        (_line(tile_bytes, "u8"), _line(tile), Scalar("i32"), Scalar("i32")),
        SHIPPED,
        dequant_model,
    )


#: activation -> (mlir-aie symbol, file, model)
ACTIVATIONS = {
    "tanh": ("tanh_bf16", "tanh.cc", tanh_model),
    "sigmoid": ("sigmoid_bf16", "sigmoid.cc", sigmoid_model),
    "silu": ("silu_bf16_size", "silu.cc", silu_model),
    "gelu": ("gelu_bf16_size", "gelu.cc", gelu_model),
}


def activation_kernel(name: str, tile: int, arch: str) -> Kernel:
    """mlir-aie's runtime-sized activation: (in, out, count). The model
    depends on the architecture (the aie2 table, the aie2p native tanh), so
    it is bound to `arch`; the source names the same file in either tree."""
    symbol, file, model = ACTIVATIONS[name]
    line = _line(tile)
    return Kernel(
        symbol,
        (line, line, Scalar("i32")),
        aie_kernels(f"{{arch}}/{file}"),
        functools.partial(model, arch=arch),
    )
