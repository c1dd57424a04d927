"""B's formats and layout: the rounding modes, the bfp16ebs8 block-float format,
and the packed order the cores read B in.

bfp16ebs8 (AIE2P's `v8bfp16ebs8`, `iron.design.block_float`) stores 8
values in 9 bytes: a shared exponent byte E, then 8 int8 mantissas, each
worth m * 2**(E - 133).

Packing is the caller's job, done once per weight: the cores read B in the
order `pack_b` writes, so every B transfer is one contiguous run per k-block
(a strided descriptor over an unpacked B has 16-byte bursts and measured 5.4x
slower end to end in IRON).
"""

from __future__ import annotations

import enum

import numpy as np

from iron.core.numerics import round_to_bf16
from iron.design import block_float

GROUP = block_float.BLOCK  # values per bfp16ebs8 block: 8 consecutive k of one n
GROUP_BYTES = block_float.BLOCK_BYTES  # one exponent byte + 8 mantissa bytes
K_BLOCK = 512  # k per B slot (one memtile k-block)
S = T = 8  # the mmul register tiling: B moves in 8x8 sub-tiles


class Choice(enum.Enum):
    """An enum spelled by its value in reprs and refusals ('bfp16')."""

    def __repr__(self) -> str:
        return repr(self.value)


class Rounding(Choice):
    """Rounding of every float32 -> bf16 / bfp16 conversion. CONV_EVEN
    (round half to even) is the accurate default; FLOOR (toward -inf, an
    arithmetic shift) is the core's power-up mode, which FastFlowLM's shipped
    overlay runs in."""

    CONV_EVEN = "conv_even"
    FLOOR = "floor"


class BFormat(Choice):
    """How B is stored: bfp16ebs8 blocks (AIE2P only) or plain bf16."""

    BFP16 = "bfp16"
    BF16 = "bf16"


def to_bfp16ebs8(x, rounding: Rounding = Rounding.CONV_EVEN) -> np.ndarray:
    """Encode the last axis of `x` (a multiple of 8 long) as bfp16ebs8
    blocks, uint8 of shape (..., n/8, 9), rounding as `rounding` says
    (`iron.design.block_float.encode`, which states the format and the
    error)."""
    return block_float.encode(x, floor=Rounding(rounding) is Rounding.FLOOR)


def from_bfp16ebs8(blocks) -> np.ndarray:
    """Decode bfp16ebs8 blocks (..., n, 9) to float32 (..., n*8), exactly."""
    return block_float.decode(blocks)


def packed_b_size(K: int, N: int, b_format: BFormat = BFormat.BFP16) -> int:
    """Bytes of a packed (K, N) B: K*N/8 blocks of 9 bytes, or K*N bf16."""
    return K * N // GROUP * GROUP_BYTES if BFormat(b_format) is BFormat.BFP16 else K * N * 2


def _check_tiling(K: int, N: int, tile_n: int, ct_k: int) -> None:
    if K % K_BLOCK or N % tile_n or K_BLOCK % ct_k or ct_k % S or tile_n % T:
        raise ValueError(
            f"B ({K}, {N}) does not tile to k-blocks of {K_BLOCK}, tile_n={tile_n}, ct_k={ct_k}"
        )


def pack_b(
    B,
    tile_n: int,
    ct_k: int,
    b_format: BFormat = BFormat.BFP16,
    rounding: Rounding = Rounding.CONV_EVEN,
) -> np.ndarray:
    """The (K, N) weight reordered into the order the cores read it.

    Viewed as (kb, kslice, i, s, cb, tb, t) = (K/512, 512/ct_k, ct_k/8, 8,
    N/tile_n, tile_n/8, 8), B is written column block by column block (cb),
    then k-block (kb: one memtile slot), then k-slice (one core's L1 B
    chunk), then 8x8 sub-tile (tb, i). Inside a sub-tile bf16 is row-major
    (s, t); bfp16 is (t, s), so the 8 consecutive k of one n that share an
    exponent form one block (grouping over n instead measured 70x the error
    in IRON).

    Returns bf16 of shape (K*N,), or uint8 blocks of shape (K*N/8, 9).
    """
    b_format, rounding = BFormat(b_format), Rounding(rounding)
    B = np.asarray(B)
    K, N = B.shape
    _check_tiling(K, N, tile_n, ct_k)
    blocked = B.reshape(K // K_BLOCK, K_BLOCK // ct_k, ct_k // S, S, N // tile_n, tile_n // T, T)
    if b_format is BFormat.BF16:
        ordered = blocked.transpose(4, 0, 1, 5, 2, 3, 6)
        floor = rounding is Rounding.FLOOR
        return round_to_bf16(ordered.astype(np.float32), floor=floor).reshape(-1)
    ordered = blocked.transpose(4, 0, 1, 5, 2, 6, 3).astype(np.float32)
    return to_bfp16ebs8(ordered.reshape(-1), rounding)


def unpack_b(packed, K: int, N: int, tile_n: int, ct_k: int, b_format: BFormat) -> np.ndarray:
    """The (K, N) float32 values a packed B holds, decoded exactly as the
    cores read them; the inverse of `pack_b`'s reordering."""
    b_format = BFormat(b_format)
    _check_tiling(K, N, tile_n, ct_k)
    packed = np.asarray(packed)
    if b_format is BFormat.BF16:
        values = packed.astype(np.float32).reshape(-1)
    else:
        values = from_bfp16ebs8(packed.reshape(-1, GROUP_BYTES))
    if values.size != K * N:
        raise ValueError(f"a packed ({K}, {N}) B holds {K * N} values, this one {values.size}")
    blocked = values.reshape(
        N // tile_n, K // K_BLOCK, K_BLOCK // ct_k, tile_n // T, ct_k // S, 8, 8
    )
    # (cb, kb, kslice, tb, i, s, t) or, for bfp16, (..., t, s)
    order = (1, 2, 4, 5, 0, 3, 6) if b_format is BFormat.BF16 else (1, 2, 4, 6, 0, 3, 5)
    return blocked.transpose(order).reshape(K, N)


def read_chunk(chunk, tile_n: int, ct_k: int, b_format: BFormat) -> np.ndarray:
    """One core's L1 chunk of packed B (ct_k x tile_n values of one k-slice,
    bf16 values or bfp16ebs8 blocks in any container) as the (ct_k, tile_n)
    float32 values the core multiplies by."""
    b_format = BFormat(b_format)
    if b_format is BFormat.BF16:
        values = np.asarray(chunk).astype(np.float32).reshape(-1)
        order = (1, 2, 0, 3)  # (tb, i, s, t) -> (i, s, tb, t)
    else:
        values = from_bfp16ebs8(np.asarray(chunk).view(np.uint8).reshape(-1, GROUP_BYTES))
        order = (1, 3, 0, 2)  # (tb, i, t, s) -> (i, s, tb, t)
    if values.size != ct_k * tile_n:
        raise ValueError(
            f"a ({ct_k}, {tile_n}) chunk holds {ct_k * tile_n} values, this one {values.size}"
        )
    return values.reshape(tile_n // T, ct_k // S, 8, 8).transpose(order).reshape(ct_k, tile_n)
