"""PrefillAttention: Gemma 4's global (full) attention of a prompt chunk,
rows [L_begin, L_end), over its KV cache (`iron.ops.flm.prefill`)."""

from __future__ import annotations

from typing import ClassVar

import attrs

from iron.core import Case, Operator, per_call
from iron.ops.flm import prefill
from iron.ops.flm.prefill import PrefillBase


@attrs.frozen
class PrefillAttention(PrefillBase, Operator):
    """Causal attention of query rows [L_begin, L_end) of a chunk over
    positions 0..L_end: the cache (2, max_l, kv_heads, head_dim) up to
    L_begin, the chunk's k and v from there; scaling 1.0. L_begin and L_end
    are per call (multiples of 128, L_end - L_begin <= chunk, L_end <=
    max_l); one image serves every range. With `writes_cache` the chunk's
    keys and values land in the cache's rows L_begin..L_end. npu2 only."""

    heads: int
    kv_heads: int
    max_l: int
    head_dim: int = 512
    chunk: int = 512
    writes_cache: bool = True
    L_begin: int = per_call(0)
    L_end: int = per_call(prefill.ROUND)

    window: ClassVar[None] = None

    cases = (
        Case({"heads": 4, "kv_heads": 2, "max_l": 512, "head_dim": 128, "chunk": 256}),
        Case({"heads": 8, "kv_heads": 1, "max_l": 1024, "head_dim": 512, "chunk": 512}),
        Case(
            {"heads": 4, "kv_heads": 2, "max_l": 512, "head_dim": 128, "chunk": 256,
             "writes_cache": False}
        ),
    )  # fmt: skip

    @staticmethod
    def design(heads, kv_heads, max_l, head_dim, chunk, writes_cache, L_begin, L_end, device):
        op = PrefillAttention(heads, kv_heads, max_l, head_dim, chunk, writes_cache, device=device)
        return prefill.build(op, L_begin, L_end)
