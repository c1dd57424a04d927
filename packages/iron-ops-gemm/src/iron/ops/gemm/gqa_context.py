"""GQAContext: one decode step's attention context: each query head's
weights over the valid prefix of a KV cache's values."""

from __future__ import annotations

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, Device, Tolerance, bf16
from iron.core.numerics import mean_abs, product_tolerance
from iron.ops.gemm.common import PRECISE, CacheReader


@attrs.frozen
class GQAContext(CacheReader):
    """context[h] = sum over p < valid of weights[h, p] * values[p, h // group],
    float32 inside, one rounding. Neither weights nor values at or past
    `valid` are read, so whatever the cache holds there (stale rows,
    garbage, NaN) never reaches the output, even where a weight is nonzero.
    weights is (heads, max_seq_len), values (max_seq_len, kv_heads,
    head_dim), context (heads, head_dim)."""

    host = "iron.ops.gemm.host:gqa_context"  # the cpu backend's kernel
    cases = (
        Case({"heads": 8, "kv_heads": 2, "head_dim": 64, "max_seq_len": 256}),
        Case({"heads": 32, "kv_heads": 8, "head_dim": 64, "max_seq_len": 2048,
              "num_aie_columns": 4}),
    )  # fmt: skip

    @staticmethod
    def arg_spec(heads, kv_heads, head_dim, max_seq_len, dtype=bf16):
        return [
            ArgSpec("weights", (heads, max_seq_len), dtype, IN),
            ArgSpec("values", (max_seq_len, kv_heads, head_dim), dtype, IN),
            ArgSpec("context", (heads, head_dim), dtype, OUT),
        ]

    def reference(self, weights, values, *, valid):
        n = self.positions(valid)
        w = weights[:, :n].astype(np.float32).reshape(self.kv_heads, self.group, n)
        v = values[:n].astype(np.float32).transpose(1, 0, 2)  # (kv_heads, n, head_dim)
        return np.matmul(w, v).reshape(self.heads, self.head_dim).astype(bf16)

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """Relative 0.04 with an absolute floor of 2e-4 times the product's
        mass, valid * mean|weights read| * mean|values read|, of `inputs`
        (weights, values) read up to `valid` when given; else of softmax
        weights (mean 1 / valid) and standard-normal values."""
        n = self.positions(self.valid)
        weights, values = inputs if inputs is not None else (None, None)
        read_w = None if weights is None else weights[:, :n]
        read_v = None if values is None else values[:n]
        return product_tolerance(PRECISE, n, mean_abs(read_w, 1 / n), mean_abs(read_v))
