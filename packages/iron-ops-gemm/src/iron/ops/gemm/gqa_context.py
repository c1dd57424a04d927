"""GQAContext: one decode step's attention context: each query head's
weights over the valid prefix of a KV cache's values."""

from __future__ import annotations

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, Device, Tolerance, bf16
from iron.core.numerics import mean_abs, product_tolerance
from iron.design import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    LocalBuffer,
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
from iron.ops.gemm.core_kernels import cast_kernel, context_kernel, zero_f32_kernel
from iron.ops.gemm.tiling import cache_rows, chunked_columns, rounds


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

    @staticmethod
    def design(heads, kv_heads, head_dim, max_seq_len, num_aie_columns, chunk, device) -> Design:
        """Each column's core sums its heads' weighted values over the cache
        of its KV groups a chunk of positions at a time, into a float32
        accumulator it rounds once into its heads' context; the per-call
        `valid` is a runtime parameter, so one design serves every position:
        chunks past it are still moved, but neither weights nor values there
        are read."""
        columns = num_aie_columns
        groups, rows = kv_heads // columns, heads // columns
        kernel = context_kernel(rows, groups, head_dim, chunk)
        zero, cast = (
            zero_f32_kernel(rows * head_dim),
            cast_kernel("f32", rows * head_dim),
        )
        fifos, workers, tasks, shim_column = [], [], [], {}
        for c in range(columns):
            w, values, out, name = f"weights{c}", f"values{c}", f"context{c}", f"core_{c}"
            fifos += [
                ObjectFifo(w, rows * chunk, "bf16", shim(c), (core(name),)),
                ObjectFifo(values, chunk * groups * head_dim, "bf16", shim(c), (core(name),)),
                ObjectFifo(out, rows * head_dim, "bf16", core(name), (shim(c),), depth=1),
            ]
            body = []
            for first in range(0, max_seq_len, chunk):
                call = Call(kernel, (Obj(w), Obj(values), Buf("acc"), first, Param("valid")))
                body += [Acquire(w), Acquire(values), call, Release(w), Release(values)]
            # zeroed after the first chunk is in, so an idle core waits holding nothing
            body.insert(2, Call(zero, (Buf("acc"), rows * head_dim)))
            body += [
                Acquire(out),
                Call(cast, (Buf("acc"), Obj(out), rows * head_dim)),
                Release(out),
            ]
            accumulator = LocalBuffer("acc", rows * head_dim, "f32")
            workers.append(Worker(name, tuple(body), buffers=(accumulator,)))
            row = kv_heads * head_dim
            tasks += [
                Fill(w, "weights", chunked_columns(device, c * rows * max_seq_len, rows,
                                                   max_seq_len, max_seq_len, chunk)),
                Fill(values, "values", cache_rows(device, c * groups * head_dim, max_seq_len,
                                                  chunk, row, groups * head_dim)),
                Drain(out, "context", TAP.linear(rows * head_dim, c * rows * head_dim)),
            ]  # fmt: skip
            shim_column |= {w: c, values: c, out: c}
        return Design(
            f"gqa_context_{heads}x{kv_heads}x{head_dim}x{max_seq_len}",
            device,
            (
                Tensor("weights", (heads, max_seq_len), "bf16", IN),
                Tensor("values", (max_seq_len, kv_heads, head_dim), "bf16", IN),
                Tensor("context", (heads, head_dim), "bf16", OUT),
            ),
            fifos=tuple(fifos),
            workers=tuple(workers),
            sequence=rounds(device, [tasks], shim_column.__getitem__),
            params=(Param("valid", member="valid"),),
        )

    #: the float32 accumulator and the bf16 context of the core's heads
    HELD_PER_HEAD_ELEMENT = 4 + 2

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
