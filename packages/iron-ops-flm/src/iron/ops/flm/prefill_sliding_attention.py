"""PrefillSlidingAttention: Gemma 4's sliding-window attention of a prompt
chunk, rows [L_begin, L_end), over a ring of `window` cache rows
(`iron.ops.flm.prefill`)."""

from __future__ import annotations

import attrs

from iron.core import Case, Operator, per_call
from iron.ops.flm import prefill
from iron.ops.flm.prefill import PrefillBase


@attrs.frozen
class PrefillSlidingAttention(PrefillBase, Operator):
    """Causal attention of query rows [L_begin, L_end) of a chunk over the
    last `window` positions each: the ring (2, window, kv_heads, head_dim),
    slot p % window, for positions before L_begin, the chunk's k and v
    from there; scaling 1.0. L_begin and L_end are per call (multiples of
    128, L_end - L_begin <= chunk, L_end <= max_l); one image serves every
    range. With `writes_cache` the chunk's last `window` positions land in
    the ring after the call has read it. npu2 only."""

    heads: int
    kv_heads: int
    max_l: int
    head_dim: int = 256
    window: int = 512
    chunk: int = 512
    writes_cache: bool = True
    L_begin: int = per_call(0)
    L_end: int = per_call(prefill.ROUND)

    cases = (
        Case({"heads": 4, "kv_heads": 2, "max_l": 1024, "head_dim": 64, "window": 128,
              "chunk": 256}),
        Case({"heads": 8, "kv_heads": 1, "max_l": 2048, "head_dim": 256, "window": 512,
              "chunk": 512}),
    )  # fmt: skip

    @staticmethod
    def design(
        heads, kv_heads, max_l, head_dim, window, chunk, writes_cache, L_begin, L_end, device
    ):
        op = PrefillSlidingAttention(
            heads, kv_heads, max_l, head_dim, window, chunk, writes_cache, device=device
        )
        return prefill.build(op, L_begin, L_end)
