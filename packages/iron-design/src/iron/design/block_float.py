"""bfp16ebs8, AIE2P's 8-value block float (`v8bfp16ebs8`), as numpy: the
encoding a core's conversion writes and what a block decodes to. Every
family that moves or multiplies bfp16 (a packed weight, the bf16 matrix
multiply that the AIE API emulates through bfp16) reads it here.

A block stores 8 values in 9 bytes: a shared exponent byte E (the largest
IEEE-754 biased exponent of the 8), then 8 int8 mantissas m, each worth
m * 2**(E - 133) (7 magnitude bits and a sign, 6 of them fractional against
2**(E - 127)).

The conversion follows the core's rounding mode: round half to even
(conv_even) or toward -inf (floor, the mode a core boots in). It is the AIE
API's ``to_v64bfp16ebs8`` of a float accumulator (aie_api
``detail/aie2p/mmul_bf16_bf16.hpp``: ``v64bfp16ebs8 tmp_a =
::to_v64bfp16ebs8(acc_a);`` in the emulated ``mmul_bf16_bf16<8, 8, 8>``),
blocks taken over 8 consecutive values of the 64.
"""

from __future__ import annotations

import numpy as np

BLOCK = 8  # values per block
BLOCK_BYTES = 9  # one exponent byte + 8 mantissa bytes
MANTISSA_SHIFT = 17  # a 24-bit significand keeps its top 7 bits
EXPONENT_BIAS = 133  # 127 + 6 fractional mantissa bits
_CHUNK = 1 << 15


def encode(x, *, floor: bool = False) -> np.ndarray:
    """The last axis of `x` (a multiple of 8 long) as bfp16ebs8 blocks:
    uint8 of shape (..., n/8, 9), each block [E, m0..m7].

    E is the largest biased exponent of the 8 values. Each value's 24-bit
    significand (the implicit bit made explicit, negated when negative) is
    shifted right by 17 + (E - e): rounded half to even, or (`floor`) an
    arithmetic shift (toward -inf). Results saturate to [-128, 127]. A value
    32 or more binades below E is therefore 0 (or -1 when negative under
    floor). Subnormal inputs (exponent field 0) encode as 0; Inf and NaN have
    no encoding and are refused.

    Error: a value v of a block with exponent E decodes to q with
    |v - q| <= 2**(E-133) / 2 (half to even; up to one 2**(E-133) where a
    value of 127.5 units or more saturates to 127) and 0 <= v - q <
    2**(E-133) (floor). Values with at most 7 significant bits below E are
    exact."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % BLOCK:
        raise ValueError(
            f"bfp16ebs8: the last axis must be a multiple of {BLOCK} values, got shape {x.shape}"
        )
    blocks = np.ascontiguousarray(x).view(np.int32).reshape(-1, BLOCK)
    out = np.empty((len(blocks), BLOCK_BYTES), dtype=np.uint8)
    for start in range(0, len(blocks), _CHUNK):  # cache-sized pieces: 2x faster on big B
        _encode(blocks[start : start + _CHUNK], floor, out[start : start + _CHUNK])
    return out.reshape(*x.shape[:-1], -1, BLOCK_BYTES)


def _encode(bits: np.ndarray, floor: bool, out: np.ndarray) -> None:
    exponent = (bits >> 23) & 0xFF
    if (exponent == 0xFF).any():
        raise ValueError("bfp16ebs8: Inf and NaN have no encoding")
    significand = np.where(exponent > 0, (bits & 0x7FFFFF) | 0x800000, 0)
    signed = np.where(bits < 0, -significand, significand)
    shared = exponent.max(axis=-1, keepdims=True)
    # 13 binades below E every significand (< 2**24) is gone after the 17, so
    # capping the shift at 30 changes no result and keeps int32 shifts defined
    shift = MANTISSA_SHIFT + np.minimum(shared - exponent, 13)
    mantissa = signed >> shift  # arithmetic: toward -inf, floor
    if not floor:
        dropped = signed - (mantissa << shift)
        half = 1 << (shift - 1)
        mantissa += (dropped > half) | ((dropped == half) & (mantissa & 1 == 1))
    out[:, 0] = shared[:, 0]
    out[:, 1:] = np.clip(mantissa, -128, 127).astype(np.int8).view(np.uint8)


_SCALES = np.ldexp(1.0, np.arange(256) - EXPONENT_BIAS)  # 2**(E - 133) per exponent byte


def decode(blocks) -> np.ndarray:
    """bfp16ebs8 blocks (..., n, 9) as float32 (..., n*8), exactly."""
    blocks = np.asarray(blocks, dtype=np.uint8)
    if blocks.ndim == 0 or blocks.shape[-1] != BLOCK_BYTES:
        raise ValueError(
            f"bfp16ebs8: blocks are {BLOCK_BYTES} bytes on the last axis, got shape {blocks.shape}"
        )
    # a float64 product is exact; one cast rounds it as float32 ldexp would
    scale = _SCALES[blocks[..., :1]]
    values = (blocks[..., 1:].view(np.int8) * scale).astype(np.float32)
    return values.reshape(*blocks.shape[:-2], -1)


def quantize(x, axis: int = -1, *, floor: bool = False) -> np.ndarray:
    """`x` as a core sees it after converting it to bfp16ebs8 with blocks of
    8 consecutive values along `axis` (whole blocks): float32 of x's shape."""
    moved = np.moveaxis(np.asarray(x, np.float32), axis, -1)
    return np.moveaxis(decode(encode(moved, floor=floor)), -1, axis)
