"""MHA: fused (grouped-query) attention over a whole sequence, for prefill."""

from __future__ import annotations

import attrs
import numpy as np

from iron.core import (
    IN,
    OUT,
    ArgSpec,
    Case,
    Device,
    Operator,
    OperatorError,
    Tolerance,
    bf16,
    require,
    tunable,
)
from iron.core.numerics import finite_abs
from iron.ops.gemm.common import check_heads

#: query rows per block (and key rows per block): the kernel's B_q = B_kv
BLOCK = 64
#: the only head dimension the kernel is built for
HEAD_DIM = 64
#: a memtile split feeds at most this many pipelines; more take two shims
PIPELINES_PER_SPLIT = 6
#: the columns the design pins: shims 4-7, memtiles 3-7
COLUMNS_NEEDED = 8


def padded_seq_len(seq_len: int, num_pipelines: int = 1) -> int:
    """`seq_len` rounded up to whole blocks of 64 query rows for every
    pipeline: the length of the buffers MHA reads and writes."""
    unit = BLOCK * num_pipelines
    return -(-seq_len // unit) * unit


@attrs.frozen
class MHA(Operator):
    """O = softmax(Q K^T / sqrt(d) + mask) V per query head, float32 inside,
    one rounding. Query head h reads KV head h // (num_heads /
    num_kv_heads) (contiguous groups, as Llama's repeat_kv). Buffers hold
    `seq_pad` = padded_seq_len(seq_len, num_pipelines) rows: key rows at
    or past seq_len are masked, output rows past seq_len are 0; with
    `causal`, query row i also ignores keys after i.

    Layout: Q and O are (num_heads, seq_pad, head_dim), K and V
    (num_kv_heads, seq_pad, head_dim); with `heads_interleaved` the
    sequence comes first, (seq_pad, heads, head_dim): the layout a
    projection GEMM produces, read as it is.

    npu2 only: the design pins its shims to columns 4-7 and its memtiles to
    columns 3-7 and needs aie2p's bfp16-emulated 8x8x8 MAC."""

    num_heads: int
    seq_len: int
    head_dim: int = HEAD_DIM
    num_kv_heads: int | None = None
    heads_interleaved: bool = False
    num_pipelines: int = tunable(1)
    causal: bool = True

    host = "iron.ops.gemm.host:mha"  # the cpu backend's kernel
    cases = (
        Case({"num_heads": 8, "seq_len": 128}),
        Case({"num_heads": 8, "seq_len": 128, "num_kv_heads": 2}),
        # padded: 100 rows become 192 (64 x 3 pipelines); sequence-major layout
        Case({"num_heads": 4, "seq_len": 100, "num_kv_heads": 2, "heads_interleaved": True,
              "num_pipelines": 3}),
    )  # fmt: skip

    @staticmethod
    def arg_spec(num_heads, kv_heads, seq_pad, head_dim, heads_interleaved, dtype=bf16):
        def layout(heads):
            return (seq_pad, heads, head_dim) if heads_interleaved else (heads, seq_pad, head_dim)

        return [
            ArgSpec("Q", layout(num_heads), dtype, IN),
            ArgSpec("K", layout(kv_heads), dtype, IN),
            ArgSpec("V", layout(kv_heads), dtype, IN),
            ArgSpec("O", layout(num_heads), dtype, OUT),
        ]

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def seq_pad(self) -> int:
        return padded_seq_len(self.seq_len, self.num_pipelines)

    def validate(self):
        check_heads(self, "num_heads", "num_kv_heads", self.kv_heads)
        require(self, "seq_len", self.seq_len >= 1, "at least 1")
        require(
            self,
            "head_dim",
            self.head_dim == HEAD_DIM,
            f"{HEAD_DIM} only (the kernel's Q, K and V tiles are {HEAD_DIM} wide)",
        )
        pipelines = self.num_pipelines
        require(self, "num_pipelines", pipelines >= 1, "at least 1")
        require(
            self,
            "num_pipelines",
            pipelines <= PIPELINES_PER_SPLIT or pipelines % 2 == 0,
            f"even above {PIPELINES_PER_SPLIT} (a memtile split feeds at most "
            f"{PIPELINES_PER_SPLIT}; more are split over two shims)",
        )
        device = self.device
        if device is None:
            return
        if device.arch != "aie2p" or device.columns < COLUMNS_NEEDED:
            width = f" at {device.columns} columns" if device.arch == "aie2p" else ""
            raise OperatorError(
                f"MHA: device={device.name}{width}: runs on the full {COLUMNS_NEEDED}-column "
                "npu2 only (the design pins its shims to columns 4-7 and its memtiles to "
                "columns 3-7, and needs aie2p's bfp16-emulated 8x8x8 MAC)"
            )
        require(
            self,
            "num_pipelines",
            pipelines <= device.columns,
            f"at most the {device.columns} columns of {device.name} (one pipeline per column)",
        )

    def reference(self, Q, K, V):
        def heads_first(x):
            x = x.astype(np.float32)
            return x.transpose(1, 0, 2) if self.heads_interleaved else x

        q, k, v = heads_first(Q), heads_first(K), heads_first(V)
        n, pad, group = self.seq_len, self.seq_pad, self.num_heads // self.kv_heads
        rows, cols = np.arange(n)[:, None], np.arange(n)[None, :]
        masked = cols > rows if self.causal else np.zeros((n, n), bool)
        scale = np.float32(1 / np.sqrt(self.head_dim))
        out = np.zeros((self.num_heads, pad, self.head_dim), np.float32)
        for h in range(self.num_heads):  # one head at a time: (seq, seq) scores, not (H, ...)
            g = h // group
            scores = (q[h, :n] @ k[g, :n].T) * scale
            scores[masked] = -np.inf
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[h, :n] = (weights / weights.sum(axis=-1, keepdims=True)) @ v[g, :n]
        out = out.transpose(1, 0, 2) if self.heads_interleaved else out
        return np.ascontiguousarray(out).astype(bf16)

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """IRON's device check of this kernel: relative 0.04, absolute 0.15
        for values in [0, 4), and 0.5% of the elements may miss. Outputs are
        weighted means of rows of V, so the absolute part scales with V:
        0.0375 x max|V| when `inputs` (Q, K, V) are given."""
        scale = 4.0 if inputs is None else float(finite_abs(inputs[2]).max(initial=0.0))
        return Tolerance.relative(0.04, atol=0.15 / 4.0 * scale, max_mismatch_frac=0.005)
