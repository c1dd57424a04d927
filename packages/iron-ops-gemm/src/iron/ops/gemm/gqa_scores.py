"""GQAScores: one decode step's attention scores of every query head
against the valid prefix of a KV cache's keys."""

from __future__ import annotations

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, Device, Tolerance, bf16
from iron.core.numerics import mean_abs, product_tolerance
from iron.design import (
    TAP,
    Acquire,
    Call,
    Design,
    Drain,
    Fill,
    Obj,
    ObjectFifo,
    Param,
    Release,
    Tensor,
    Worker,
    core,
    shim,
)
from iron.ops.gemm.common import PRECISE, CacheReader
from iron.ops.gemm.core_kernels import scores_kernel
from iron.ops.gemm.tiling import cache_rows, chunked_columns, rounds


@attrs.frozen
class GQAScores(CacheReader):
    """scores[h, p] = q[h] . keys[p, h // group] / sqrt(head_dim) for the
    positions p < valid, float32 inside, one rounding; positions at or past
    `valid` are not read and their scores are 0 (the Softmax that follows,
    given the same `valid`, masks them). q is (heads, head_dim), keys
    (max_seq_len, kv_heads, head_dim), scores (heads, max_seq_len)."""

    host = "iron.ops.gemm.host:gqa_scores"  # the cpu backend's kernel
    cases = (
        Case({"heads": 8, "kv_heads": 2, "head_dim": 64, "max_seq_len": 256}),
        # Llama 3.2 1B: 32 query heads in 8 groups; pinned, the default follows the width
        Case({"heads": 32, "kv_heads": 8, "head_dim": 64, "max_seq_len": 2048,
              "num_aie_columns": 4}),
    )  # fmt: skip

    @staticmethod
    def arg_spec(heads, kv_heads, head_dim, max_seq_len, dtype=bf16):
        return [
            ArgSpec("q", (heads, head_dim), dtype, IN),
            ArgSpec("keys", (max_seq_len, kv_heads, head_dim), dtype, IN),
            ArgSpec("scores", (heads, max_seq_len), dtype, OUT),
        ]

    @staticmethod
    def design(heads, kv_heads, head_dim, max_seq_len, num_aie_columns, chunk, device) -> Design:
        """Each column's core holds its heads' queries for the call and
        scores the cache of its KV groups a chunk of positions at a time
        (positions x its groups' heads, straight from the shim); the per-call
        `valid` is a runtime parameter, so one design serves every position:
        chunks past it are still moved, but neither read nor scored."""
        columns = num_aie_columns
        groups, rows = kv_heads // columns, heads // columns
        scale = 1 / np.sqrt(head_dim)
        kernel = scores_kernel(rows, groups, head_dim, chunk, np.float32(scale))
        fifos, workers, tasks, shim_column = [], [], [], {}
        for c in range(columns):
            q, keys, out, name = f"q{c}", f"keys{c}", f"scores{c}", f"core_{c}"
            fifos += [
                ObjectFifo(q, rows * head_dim, "bf16", shim(c), (core(name),), depth=1),
                ObjectFifo(keys, chunk * groups * head_dim, "bf16", shim(c), (core(name),)),
                ObjectFifo(out, rows * chunk, "bf16", core(name), (shim(c),)),
            ]
            body = [Acquire(q)]
            for first in range(0, max_seq_len, chunk):
                call = Call(kernel, (Obj(q), Obj(keys), Obj(out), first, Param("valid")))
                body += [Acquire(keys), Acquire(out), call, Release(keys), Release(out)]
            workers.append(Worker(name, (*body, Release(q))))
            row = kv_heads * head_dim
            tasks += [
                Fill(q, "q", TAP.linear(rows * head_dim, c * rows * head_dim)),
                Fill(keys, "keys", cache_rows(device, c * groups * head_dim, max_seq_len, chunk,
                                              row, groups * head_dim)),
                Drain(out, "scores", chunked_columns(device, c * rows * max_seq_len, rows,
                                                     max_seq_len, max_seq_len, chunk)),
            ]  # fmt: skip
            shim_column |= {q: c, keys: c, out: c}
        return Design(
            f"gqa_scores_{heads}x{kv_heads}x{head_dim}x{max_seq_len}",
            device,
            (
                Tensor("q", (heads, head_dim), "bf16", IN),
                Tensor("keys", (max_seq_len, kv_heads, head_dim), "bf16", IN),
                Tensor("scores", (heads, max_seq_len), "bf16", OUT),
            ),
            fifos=tuple(fifos),
            workers=tuple(workers),
            sequence=rounds(device, [tasks], shim_column.__getitem__),
            params=(Param("valid", member="valid"),),
        )

    @property
    def scale(self) -> np.float32:
        return np.float32(1 / np.sqrt(self.head_dim))

    def reference(self, q, keys, *, valid):
        n = self.positions(valid)
        q = q.astype(np.float32).reshape(self.kv_heads, self.group, self.head_dim)
        # (kv_heads, n, head_dim), contiguous so the batched product stays in BLAS
        k = np.ascontiguousarray(keys[:n].astype(np.float32).transpose(1, 0, 2))
        scores = np.zeros((self.heads, self.max_seq_len), np.float32)
        scores[:, :n] = (np.matmul(q, k.transpose(0, 2, 1)) * self.scale).reshape(self.heads, n)
        return scores.astype(bf16)

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """Relative 0.04 with an absolute floor of 2e-4 times the scaled
        product's mass, head_dim * mean|q| * mean|keys read| / sqrt(head_dim),
        of `inputs` (q, keys) read up to `valid` when given, else of
        standard-normal inputs."""
        q, keys = inputs if inputs is not None else (None, None)
        read = None if keys is None else keys[: self.positions(self.valid)]
        return product_tolerance(
            PRECISE, self.head_dim, mean_abs(q), mean_abs(read) * float(self.scale)
        )
