"""The core kernels the streaming designs link, each with a numpy model of
its arithmetic: bf16 in, float32 inside, a rounding to bf16 wherever the C++
stores a bf16 value (to nearest even: our kernels set the mode, and the
designs set it before mlir-aie's). A model writes its output view in place,
as the kernel does (`iron.design.Kernel`). Every kernel is listed in
``kernels/manifest.json`` (`iron.design.manifest`).

Two sources:

- mlir-aie's kernel tree at iron-design's pin: `eltwise_add_bf16_vector`
  (aie2/add.cc), `eltwise_mul_bf16_vector` (aie2/mul.cc), `bf16_relu`
  (aie2/relu.cc), `silu_bf16` (aie2/silu.cc, aie2p/silu.cc) and `gelu_bf16`
  (aie2/gelu.cc, aie2p/gelu.cc) bake 1024 elements into their loops, so they
  serve 1024-element lines only. The pin has no aie2p add.cc, mul.cc or
  relu.cc: npu2 builds aie2's file, as mlir-aie's own factories do
  (`_kernel_source` in python/iron/kernels/_common.py falls back from the
  aie2p directory to aie2's when a file is absent there).
- ours (kernels/): `eltwise.cc`, sized lines of add, mul, ReLU, AXPY,
  LeakyReLU, Clamp and the unsigned int4 dequant, for both generations;
  `{aie2,aie2p}/activation.cc`, the sized tanh, sigmoid, SiLU and GELU the
  pin lacks (it has no tanh.cc or sigmoid.cc, and its silu and gelu are
  fixed at 1024). On aie2 tanh is mlir-aie's lookup table
  (`iron.design.lut_based_ops.tanh_bf16`, modelled table and all); on aie2p
  the native `aie::tanh`, modelled as float32 tanh rounded to bf16 (its
  own error is not published; the aie2p tolerance covers it).

Float scalars reach our kernels as the int32 bits of a float32, because a
design passes kernel scalars as integers.
"""

from __future__ import annotations

import functools

import numpy as np

from iron.core import bf16
from iron.design import (
    Call,
    Kernel,
    Memref,
    Scalar,
    aie_kernels,
    aie_runtime_lib,
    shipped,
)
from iron.design.kernel_batch import batched
from iron.design.lut_based_ops import tanh_bf16 as tanh_lut

#: the one line length mlir-aie's add, mul, relu, silu and gelu kernels
#: accept (the loop bound is compiled in)
FIXED_LINE = 1024
SHIPPED = shipped("iron.ops.eltwise", "kernels/eltwise.cc")
#: our helpers (kernels/rows.cc): setting the rounding mode, masking a row's tail
ROW_HELPERS = shipped("iron.ops.eltwise", "kernels/rows.cc")


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


def set_rounding_model() -> None:
    """iron_set_rounding_conv_even moves no data; the models round as it sets."""


def _no_results(*args) -> None:
    """The batch form of a kernel that moves no data: nothing to compute or write."""


batched(set_rounding_model, reads=(), writes=(), compute=_no_results, write=_no_results)

#: iron_set_rounding_conv_even(): every later float -> bf16 conversion on the
#: core rounds to nearest even (a core boots in floor; mlir-aie's kernels
#: never set the mode, so a design calls this before them)
SET_ROUNDING = Kernel("iron_set_rounding_conv_even", (), ROW_HELPERS, set_rounding_model)


def rounding_prologue(kernel: Kernel) -> tuple[Call, ...]:
    """The calls a design makes before `kernel`: conv_even before an
    mlir-aie kernel, nothing before ours (they set it themselves)."""
    return (Call(SET_ROUNDING, ()),) if kernel.source.package is None else ()


# ---- models of eltwise.cc (and of mlir-aie's add, mul and relu) ----------------------


def add_model(a, b, y, n=FIXED_LINE):
    """float32 sum, one rounding (add.cc: aie::add of bf16 vectors; ours:
    the sum in the float32 accumulator)."""
    y[:n] = (_f32(a[:n]) + _f32(b[:n])).astype(bf16)


def mul_model(a, b, y, n=FIXED_LINE):
    """The exact product, one rounding."""
    y[:n] = (_f32(a[:n]) * _f32(b[:n])).astype(bf16)


def _add_lines(a, b, y, n=None):
    """`add_model` for a stack of calls (every element of each line: a call
    writes its first n)."""
    return (_f32(a) + _f32(b)).astype(bf16)


def _mul_lines(a, b, y, n=None):
    """`mul_model` for a stack of calls."""
    return (_f32(a) * _f32(b)).astype(bf16)


def _write_binary(line, a, b, y, n=FIXED_LINE):
    y[:n] = line[:n]


def _whole_line(a, b, y, n=FIXED_LINE) -> bool:
    return n >= y.size


for _model, _lines in ((add_model, _add_lines), (mul_model, _mul_lines)):
    batched(
        _model, reads=(0, 1), writes=(2,), compute=_lines, write=_write_binary, whole=_whole_line
    )


def relu_model(x, y, n=FIXED_LINE):
    y[:n] = np.maximum(_f32(x[:n]), np.float32(0)).astype(bf16)


def axpy_model(x, y, out, n, factor_bits):
    """factor * x rounded once to float32 (the factor's three bf16 parts
    multiply-accumulated: the first two products sum exactly), + y in
    float32, one rounding to bf16."""
    factor = bits_float(factor_bits)
    out[:n] = (factor * _f32(x[:n]) + _f32(y[:n])).astype(bf16)


def leaky_relu_model(x, y, n, alpha_bits):
    v = _f32(x[:n])
    y[:n] = np.where(v >= 0, v, bits_float(alpha_bits) * v).astype(bf16)


def clamp_model(x, y, n, lo_bits, hi_bits):
    """min(max(x, bf16(lo)), bf16(hi)): for a bf16 x the bf16 of the float32
    clip, since no bf16 lies between a bound and its rounding."""
    y[:n] = np.clip(_f32(x[:n]), bits_float(lo_bits), bits_float(hi_bits)).astype(bf16)


def dequant_model(packed, y, n, group):
    """One tile: n/2 bytes of codes (element 2k low nibble), then n/group
    little-endian bf16 scales; code * scale is exact in float32 (the kernel's
    (128 + code) * scale - 128 * scale too), rounded once."""
    codes_bytes = packed[: n // 2]
    codes = np.stack([codes_bytes & 0x0F, codes_bytes >> 4], axis=-1).reshape(n)
    scales = np.ascontiguousarray(packed[n // 2 : n // 2 + n // group * 2]).view("<u2")
    scale = scales.astype(np.uint16).view(bf16).astype(np.float32)
    y[:n] = (codes.reshape(-1, group).astype(np.float32) * scale[:, None]).reshape(n).astype(bf16)


# ---- models of the activations ---------------------------------------------------------


def tanh_native(z) -> np.ndarray:
    """aie2p's `aie::tanh<bfloat16>` of float32 lanes: float32 tanh rounded to
    bf16 (its own approximation error is not published)."""
    return _round(np.tanh(_f32(z)))


def _tanh_of(arch: str):
    """The generation's tanh of float32 lanes, as float32 holding a bf16:
    aie2 rounds the argument to bf16 for its table."""
    if arch == "aie2":
        return lambda z: _f32(tanh_lut(_round(z)))
    return tanh_native


_HALF = np.float32(0.5)
#: activation.h: gelu's tanh argument is x (a + b x^2)
GELU_A = np.float32(0.7978845608)
GELU_B = np.float32(0.03564453125)  # sqrt(2/pi) 0.044715, as a bf16


def tanh_model(x, y, n, arch):
    """iron_tanh_bf16 (activation.h tanh_line)."""
    y[:n] = _tanh_of(arch)(_f32(x[:n])).astype(bf16)


def sigmoid_model(x, y, n, arch):
    """iron_sigmoid_bf16 (activation.h sigmoid_line): t = tanh(x / 2), then
    0.5 + 0.5 t (exact in float32) rounded once."""
    t = _tanh_of(arch)(_f32(x[:n]) * _HALF)
    y[:n] = (_HALF + _HALF * t).astype(bf16)


def silu_model(x, y, n, arch):
    """iron_silu_bf16 (activation.h silu_line): h = x / 2 as bf16,
    t = tanh(h); h t + h rounded once to float32, then to bf16."""
    h = _round(_f32(x[:n]) * _HALF)
    y[:n] = (h * _tanh_of(arch)(h) + h).astype(bf16)


def gelu_model(x, y, n, arch):
    """iron_gelu_bf16 (activation.h gelu_line): x^2 rounded to bf16,
    q = a + b x^2 rounded to bf16, t = tanh(x q), then h t + h with h = x / 2."""
    v = _f32(x[:n])
    q = _round(_round(v * v) * GELU_B + GELU_A)
    t = _tanh_of(arch)(v * q)
    h = _round(v * _HALF)
    y[:n] = (h * t + h).astype(bf16)


_BETA = _round(0.044715)
_SQRT_2_OVER_PI = _round(0.79788456)


def pinned_silu_model(x, y, arch):
    """mlir-aie `silu_bf16` (aie2/silu.cc, aie2p/silu.cc, 1024 elements):
    tanh(x / 2) as bf16, 1 + tanh as bf16, times 0.5 (exact), then x times
    that, rounded once."""
    v = _f32(x[:FIXED_LINE])
    one_plus = _round(_tanh_of(arch)(v * _HALF) + np.float32(1))
    y[:FIXED_LINE] = (v * (one_plus * _HALF)).astype(bf16)


def pinned_gelu_model(x, y, arch):
    """mlir-aie `gelu_bf16` (aie2/gelu.cc, aie2p/gelu.cc, 1024 elements):
    x^2, x^3, 0.044715 x^3 and x + that each as bf16 (the constants bf16);
    times sqrt(2/pi), as bf16 on aie2 (the table reads bf16), float32 on
    aie2p; tanh; 1 + tanh as bf16; times 0.5 (exact); then x times that,
    rounded once."""
    v = _f32(x[:FIXED_LINE])
    cube = _round(v * _round(v * v))
    inner = _round(v + _round(cube * _BETA)) * _SQRT_2_OVER_PI
    one_plus = _round(_tanh_of(arch)(inner) + np.float32(1))
    y[:FIXED_LINE] = (v * (one_plus * _HALF)).astype(bf16)


# ---- kernels -------------------------------------------------------------------------------


def _line(n: int, dtype: str = "bf16") -> Memref:
    return Memref((n,), dtype)


#: the aie2 file mlir-aie builds for aie2p too, where its aie2p directory has none
#: (`_kernel_source`, python/iron/kernels/_common.py)
_FALLBACK = "aie2"


def binary_kernel(op: str, tile: int) -> Kernel:
    """add or mul of two lines: mlir-aie's for 1024-element lines, ours otherwise."""
    model = {"add": add_model, "mul": mul_model}[op]
    line = _line(tile)
    if tile == FIXED_LINE:
        return Kernel(
            f"eltwise_{op}_bf16_vector", (line,) * 3, aie_kernels(f"{_FALLBACK}/{op}.cc"), model
        )
    return Kernel(f"iron_{op}_bf16", (line,) * 3 + (Scalar("i32"),), SHIPPED, model)


def relu_kernel(tile: int) -> Kernel:
    """max(x, 0) of a line: mlir-aie's for 1024-element lines, ours otherwise."""
    line = _line(tile)
    if tile == FIXED_LINE:
        return Kernel("bf16_relu", (line, line), aie_kernels(f"{_FALLBACK}/relu.cc"), relu_model)
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


#: activation -> (our model, mlir-aie's 1024-element kernel and its model, if any)
ACTIVATIONS = {
    "tanh": (tanh_model, None),
    "sigmoid": (sigmoid_model, None),
    "silu": (silu_model, ("silu_bf16", "silu.cc", pinned_silu_model)),
    "gelu": (gelu_model, ("gelu_bf16", "gelu.cc", pinned_gelu_model)),
}


def aie2_lut_tables() -> dict:
    """What an aie2 object that reads tanh through ``getTanhBf16``
    (``lut_based_ops.h``) needs besides its file: the tables
    ``lut_based_ops.cpp`` defines, compiled into the same object, and the
    header's directory (mlir-aie's own activation factory builds it so:
    ``_create_lut_kernel`` in python/iron/kernels/activation.py)."""
    return {
        "extra_sources": (aie_runtime_lib("AIE2/lut_based_ops.cpp"),),
        "include_dirs": (aie_runtime_lib("AIE2"),),
    }


def activation_kernel(name: str, tile: int, arch: str) -> Kernel:
    """mlir-aie's `silu_bf16` or `gelu_bf16` for a 1024-element line where
    it has one, else ours, `iron_{name}_bf16(in, out, count)`, from the
    generation's activation.cc. On aie2 either object links the tanh tables."""
    model, pinned = ACTIVATIONS[name]
    line = _line(tile)
    tables = aie2_lut_tables() if arch == "aie2" else {}
    if pinned is not None and tile == FIXED_LINE:
        symbol, file, pinned_model = pinned
        return Kernel(
            symbol,
            (line, line),
            aie_kernels(f"{arch}/{file}", **tables),
            functools.partial(pinned_model, arch=arch),
        )
    return Kernel(
        f"iron_{name}_bf16",
        (line, line, Scalar("i32")),
        shipped("iron.ops.eltwise", f"kernels/{arch}/activation.cc", **tables),
        functools.partial(model, arch=arch),
    )
