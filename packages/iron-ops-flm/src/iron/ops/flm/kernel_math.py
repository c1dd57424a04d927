"""The arithmetic of the Gemma 4 kernels (kernels/gemma4.h), in numpy: what
the numpy models of every Gemma 4 kernel are built of, step for step as
the C++ does it.

- A dot product runs on 16 float32 lanes: lane l adds the exact products of
  elements l, l + 16, ... in order (one rounding per add), then the lanes
  are summed as a tree, halves first (`lane_dot`, `lane_sum`);
- tanh is the [7/6] Pade approximant in float32, its input clamped to
  +-4.97 (error below 1e-4 everywhere), not the core's aie::tanh: IRON
  measured aie2p's at up to 0.038, which a soft-cap of 30 turns into about
  1.1 of a logit (`tanh`, `gelu`);
- exp is aie::exp2 of x log2(e), a bf16 out (`exp_bf16`); modelled as 2^x
  rounded to nearest, its own error is not published;
- 1/sqrt and 1/x are the core's estimates refined by one Newton step,
  modelled as the float32 results (`rsqrt`).
"""

from __future__ import annotations

import numpy as np

from iron.core import bf16

LANES = 16
LOG2E = np.float32(1.4426950408889634)
#: where the Pade approximant of tanh is clamped (it reaches 1 - 6e-7 there)
TANH_CLAMP = np.float32(4.97)
GELU_A = np.float32(0.7978845608028654)  # sqrt(2/pi)
GELU_B = np.float32(0.044715)


def f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def round_bf16(x) -> np.ndarray:
    """float32 values rounded to bf16 (nearest even) and widened back."""
    return f32(x).astype(bf16).astype(np.float32)


def lane_sum(v) -> np.ndarray:
    """The 16 lanes of the last axis summed as the kernels do: halves added,
    8 + 8, 4 + 4, 2 + 2, 1 + 1."""
    v = f32(v)
    while v.shape[-1] > 1:
        half = v.shape[-1] // 2
        v = v[..., :half] + v[..., half:]
    return v[..., 0]


def lane_dot(a, b) -> np.ndarray:
    """sum(a * b) over the last axis (a multiple of 16): each lane adds its
    exact products in order, then `lane_sum`. a and b broadcast."""
    a, b = f32(a), f32(b)
    steps = a.shape[-1] // LANES
    a = a.reshape(*a.shape[:-1], steps, LANES)
    b = b.reshape(*b.shape[:-1], steps, LANES)
    acc = a[..., 0, :] * b[..., 0, :]
    for s in range(1, steps):
        acc = acc + a[..., s, :] * b[..., s, :]
    return lane_sum(acc)


def tanh(x) -> np.ndarray:
    """x (135135 + 17325 x^2 + 378 x^4 + x^6) / (135135 + 62370 x^2 + 3150
    x^4 + 28 x^6), x clamped to +-TANH_CLAMP, Horner in float32."""
    x = np.clip(f32(x), -TANH_CLAMP, TANH_CLAMP)
    x2 = x * x
    p = x * (np.float32(135135) + x2 * (np.float32(17325) + x2 * (np.float32(378) + x2)))
    q = np.float32(135135) + x2 * (
        np.float32(62370) + x2 * (np.float32(3150) + np.float32(28) * x2)
    )
    return p * (np.float32(1) / q)


def gelu(x) -> np.ndarray:
    """0.5 x (1 + tanh(a x + a b x^3)) in float32, `tanh` above."""
    x = f32(x)
    inner = GELU_A * (x + GELU_B * (x * x * x))
    return np.float32(0.5) * x * (np.float32(1) + tanh(inner))


def exp_bf16(x) -> np.ndarray:
    """aie::exp2<bfloat16>(x log2 e): the float32 product, then 2^ that as a bf16."""
    with np.errstate(over="ignore"):
        return round_bf16(np.exp2(f32(x) * LOG2E))


def rsqrt(x) -> np.float32:
    return np.float32(1) / np.sqrt(np.float32(x))


def bits_float(bits: int) -> np.float32:
    """A float32 from the int32 that carries it as a kernel scalar."""
    return np.array(bits, dtype=np.int64).astype(np.int32).view(np.float32)[()]


def float_bits(value: float) -> int:
    """The int32 carrying float32 `value` as a kernel scalar."""
    return int(np.array(value, dtype=np.float32).view(np.int32))
