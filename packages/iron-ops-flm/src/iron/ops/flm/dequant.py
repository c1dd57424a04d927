"""DequantBFP: FastFlowLM's q4nx 4-bit weights to the packed bfp16ebs8 B
that `FLMGemm` reads (tile_n 64, ct_k 128), on the device.

q4nx, innermost first (every layer holds whole units of the one below):

| layer | unit  | holds                                        | bytes   |
|-------|-------|----------------------------------------------|---------|
| 1     | byte  | 2 codes: one k, two adjacent n (low nibble first) | 1  |
| 2     | slice | 8 bytes, stepping n by 2 (16 n)              | 8       |
| 3     | half  | 256 slices, stepping k by 1                  | 2048    |
| 4     | codes | 2 halves, stepping n by 16 (32 n x 256 k)    | 4096    |
| 5     | block | 512 B of bf16 scales, 512 B of bf16 mins, codes | 5120 |
| 6     | matrix| (N/32) x (K/256) blocks, row-major            | 5NK/8   |

A scale and a min (laid out [8 k-groups][32 n]) cover 32 consecutive k of
one n; a value is min + scale * code. The cores compute that in float32,
round it to bf16 and then to bfp16ebs8, both toward -inf (they never set a
rounding mode), and write the 9-byte blocks where `pack_b` would put them.
"""

from __future__ import annotations

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, Operator, Tolerance, bf16, require
from iron.core.numerics import round_to_bf16
from iron.ops.flm.packing import (
    GROUP,
    GROUP_BYTES,
    K_BLOCK,
    Rounding,
    S,
    T,
    to_bfp16ebs8,
)
from iron.ops.flm.schedule import CT_K_FOR_TILE_N

BLOCK_N, BLOCK_K = 32, 256  # one q4nx block
SCALE_GROUP = 32  # k per scale and min
BLOCK_BYTES = 5120
TILE_N = 64  # the B layout FLMGemm reads at K > 512
CT_K = CT_K_FOR_TILE_N[TILE_N]


def q4nx_size(K: int, N: int) -> int:
    """Bytes of a (K in, N out) q4nx matrix: 5NK/8."""
    return N // BLOCK_N * (K // BLOCK_K) * BLOCK_BYTES


def _blocks(q, K: int, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, n0, k0): every block's float32 values (blocks, 32 n, 256 k)
    and where each block starts."""
    q = np.ascontiguousarray(q, dtype=np.uint8).reshape(-1)
    if q.size != q4nx_size(K, N):
        raise ValueError(f"a q4nx ({K}, {N}) matrix is {q4nx_size(K, N)} bytes, got {q.size}")
    blocks = q.reshape(-1, BLOCK_BYTES)
    groups = BLOCK_K // SCALE_GROUP
    scales = blocks[:, : groups * BLOCK_N * 2].copy().view(bf16).reshape(-1, groups, BLOCK_N)
    mins = blocks[:, groups * BLOCK_N * 2 : 1024].copy().view(bf16).reshape(-1, groups, BLOCK_N)
    codes = blocks[:, 1024:].reshape(-1, 2, BLOCK_K, 8)  # (block, half, k, byte)
    nibbles = np.stack([codes & 0xF, codes >> 4], axis=-1)  # low nibble: the even n
    codes = nibbles.reshape(-1, 2, BLOCK_K, 16).transpose(0, 1, 3, 2).reshape(-1, BLOCK_N, BLOCK_K)
    group = np.arange(BLOCK_K) // SCALE_GROUP
    scale = scales.astype(np.float32)[:, group, :].transpose(0, 2, 1)  # (block, n, k)
    low = mins.astype(np.float32)[:, group, :].transpose(0, 2, 1)
    values = low + scale * codes.astype(np.float32)
    index = np.arange(len(blocks))
    return values, index // (K // BLOCK_K) * BLOCK_N, index % (K // BLOCK_K) * BLOCK_K


def encode_block(block, out) -> None:
    """One q4nx block (5120 bytes) to its 1024 bfp16ebs8 blocks, in B's
    packed order within the block: (k-slice 2, n/8 4, k/8 16, n%8 8), as a
    core writes them (the design's kernel model)."""
    values, _, _ = _blocks(np.asarray(block).view(np.uint8), BLOCK_K, BLOCK_N)
    weights = round_to_bf16(values[0], floor=True).astype(np.float32)  # (32 n, 256 k)
    encoded = to_bfp16ebs8(weights, Rounding.FLOOR).reshape(BLOCK_N // T, T, 2, CT_K // S, 9)
    out.view(np.uint8).reshape(-1, GROUP_BYTES)[:] = encoded.transpose(2, 0, 3, 1, 4).reshape(-1, 9)


def dequantize(q, K: int, N: int) -> np.ndarray:
    """The (K, N) bf16 weights a q4nx matrix holds, as the cores compute them
    (float32 min + scale * code, rounded toward -inf)."""
    values, _, _ = _blocks(q, K, N)
    dense = values.reshape(N // BLOCK_N, K // BLOCK_K, BLOCK_N, BLOCK_K).transpose(0, 2, 1, 3)
    return round_to_bf16(dense.reshape(N, K).T, floor=True)


def random_q4nx(rng: np.random.Generator, K: int, N: int) -> np.ndarray:
    """A random q4nx matrix with plausible bf16 scales (0.002..0.05) and
    mins (-0.4..0.4) and uniform codes."""
    n_blocks = q4nx_size(K, N) // BLOCK_BYTES
    pairs = BLOCK_K // SCALE_GROUP * BLOCK_N
    scales = rng.uniform(0.002, 0.05, (n_blocks, pairs)).astype(bf16)
    mins = rng.uniform(-0.4, 0.4, (n_blocks, pairs)).astype(bf16)
    codes = rng.integers(0, 256, (n_blocks, BLOCK_N * BLOCK_K // 2), dtype=np.uint8)
    parts = [scales.view(np.uint8), mins.view(np.uint8), codes]
    return np.concatenate(parts, axis=1).reshape(-1)


@attrs.frozen
class DequantBFP(Operator):
    """q4nx (K in-features, N out-features) -> B for a (M, K) x (K, N)
    FLMGemm, packed bfp16ebs8 at tile_n 64, byte for byte what
    pack_b(dequantize(q), 64, 128, BFP16, FLOOR) gives. K a multiple of
    512 but not 512 itself (FLMGemm reads K = 512 at tile_n 128, another
    order), N of 64; block-float hardware only."""

    K: int
    N: int

    cases = (Case({"K": 1024, "N": 128}), Case({"K": 1536, "N": 640}))

    @staticmethod
    def arg_spec(K, N):
        return [
            ArgSpec("q", (q4nx_size(K, N),), np.uint8, IN),
            ArgSpec("B", (K * N // GROUP, GROUP_BYTES), np.uint8, OUT),
        ]

    def validate(self) -> None:
        require(
            self, "K", self.K > 0 and self.K % K_BLOCK == 0, f"a positive multiple of {K_BLOCK}"
        )
        require(
            self,
            "K",
            self.K != K_BLOCK,
            f"not {K_BLOCK}: FLMGemm reads a single k-block at tile_n=128, in another order "
            "than this operator writes",
        )
        require(self, "N", self.N > 0 and self.N % TILE_N == 0, f"a positive multiple of {TILE_N}")
        if self.device is not None:
            require(
                self,
                f"device={self.device.name}",
                self.device.block_float,
                "bfp16ebs8 needs block-float hardware (npu2)",
            )

    def reference(self, q):
        """The device's walk: each q4nx block dequantized, its 8-k groups
        encoded and written at their place in B's packed order."""
        values, n0, k0 = _blocks(q, self.K, self.N)
        weights = round_to_bf16(values, floor=True).astype(np.float32)
        encoded = to_bfp16ebs8(weights, Rounding.FLOOR)  # (block, n, k/8, 9)
        n = n0[:, None, None] + np.arange(BLOCK_N)[None, :, None]
        k = k0[:, None, None] + np.arange(0, BLOCK_K, GROUP)[None, None, :]
        # B's packed order (cb, kb, kslice, tb, i, t), one block of s = 8 k each
        place = (n // TILE_N) * (self.K // K_BLOCK) + k // K_BLOCK
        place = place * (K_BLOCK // CT_K) + k % K_BLOCK // CT_K
        place = place * (TILE_N // T) + n % TILE_N // T
        place = place * (CT_K // S) + k % CT_K // S
        place = place * T + n % T
        out = np.empty((self.K * self.N // GROUP, GROUP_BYTES), np.uint8)
        out[place.reshape(-1)] = encoded.reshape(-1, GROUP_BYTES)
        return out

    @staticmethod
    def design(K, N, device):
        """One core per column: each takes a column block's q4nx blocks (two
        rows of 32 n) straight from DDR, one block at a time, and sends the
        1024 bfp16ebs8 blocks of each to DDR, where the drain's pattern puts
        them in B's packed order (`iron.ops.flm.design.dequant_design`)."""
        from iron.ops.flm.design import dequant_design

        return dequant_design(K, N, device)

    def tolerance(self, device=None, *, inputs=None) -> Tolerance:
        return Tolerance.exact()

    def example_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        return [random_q4nx(rng, self.K, self.N)]
