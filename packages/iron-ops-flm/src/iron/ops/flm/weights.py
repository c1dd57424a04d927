"""How the Gemma 4 operators store a weight matrix (out, in), as
transformers lays it out: bf16 as the checkpoint has it (row-major), or
bfp16ebs8 blocks of 8 consecutive inputs of one output (row-major, 9 bytes
a block: the family's block-float format, `iron.ops.flm.packing`)."""

from __future__ import annotations

import numpy as np

from iron.core import bf16
from iron.ops.flm.packing import GROUP, GROUP_BYTES, Choice, Rounding, from_bfp16ebs8, to_bfp16ebs8


class WeightFormat(Choice):
    BF16 = "bf16"
    BFP16 = "bfp16"


def weight_format(operator: str):
    """An attrs converter to WeightFormat whose refusal names `operator`."""

    def convert(value):
        try:
            return WeightFormat(value)
        except ValueError:
            raise ValueError(f"{operator}: weights={value!r}: bf16 or bfp16") from None

    return convert


def pack_rows(W, weights: WeightFormat, rounding: Rounding = Rounding.CONV_EVEN) -> np.ndarray:
    """A (rows, k) matrix in `weights`: bf16 (rows, k), or bfp16ebs8
    (rows * k / 8, 9) bytes."""
    W = np.asarray(W)
    if WeightFormat(weights) is WeightFormat.BF16:
        return np.ascontiguousarray(W.astype(bf16))
    rows, k = W.shape
    blocks = to_bfp16ebs8(W.astype(np.float32).reshape(rows, k // GROUP, GROUP), rounding)
    return blocks.reshape(rows * k // GROUP, GROUP_BYTES)


def unpack_rows(packed, rows: int, k: int, weights: WeightFormat) -> np.ndarray:
    """The (rows, k) float32 values a packed matrix holds, as the cores read
    them (bfp16 as (n, 9) bytes or as a design's 9-byte blocks)."""
    if WeightFormat(weights) is WeightFormat.BF16:
        return np.asarray(packed).reshape(rows, k).astype(np.float32)
    blocks = np.ascontiguousarray(packed).view(np.uint8).reshape(rows, k // GROUP, GROUP_BYTES)
    return from_bfp16ebs8(blocks).reshape(rows, k)


def as_blocks(packed, weights: WeightFormat) -> np.ndarray:
    """A packed matrix as a design's tensor: bf16 as it is, bfp16 as
    9-byte bfp16ebs8 elements."""
    if WeightFormat(weights) is WeightFormat.BF16:
        return np.asarray(packed)
    return np.ascontiguousarray(packed, np.uint8).view(np.dtype((np.void, GROUP_BYTES))).reshape(-1)
