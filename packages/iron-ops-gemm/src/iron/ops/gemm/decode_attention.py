"""DecodeAttention: one new token's attention over a KV cache, recorded as
GQAScores -> Softmax -> GQAContext with one per-call valid length."""

from __future__ import annotations

import attrs

from iron.core import IN, ArgSpec, Case, Composite, bf16
from iron.ops.eltwise.softmax import Softmax
from iron.ops.gemm.common import part_designs, resolved_parts
from iron.ops.gemm.gqa_context import GQAContext
from iron.ops.gemm.gqa_scores import GQAScores


@attrs.frozen
class DecodeAttention(Composite):
    """context = softmax(q K^T / sqrt(head_dim)) V over the first `valid`
    cache positions, for q (heads, head_dim) and caches (max_seq_len,
    kv_heads, head_dim). Records three steps: GQAScores (scores of the
    valid prefix, 0 past it), Softmax over the valid columns, GQAContext
    over the valid prefix. `valid` is given when recording, as an int or an
    expression of the graph's scalars (``pos + 1``), and binds the per-call
    `valid` of all three: one recorded step serves every position."""

    heads: int
    kv_heads: int
    head_dim: int
    max_seq_len: int

    cases = (
        Case({"heads": 8, "kv_heads": 2, "head_dim": 64, "max_seq_len": 256}),
        Case({"heads": 32, "kv_heads": 8, "head_dim": 64, "max_seq_len": 2048}),
    )

    @staticmethod
    def input_spec(heads, kv_heads, head_dim, max_seq_len, dtype=bf16):
        cache = (max_seq_len, kv_heads, head_dim)
        return [
            ArgSpec("q", (heads, head_dim), dtype, IN),
            ArgSpec("keys", cache, dtype, IN),
            ArgSpec("values", cache, dtype, IN),
        ]

    def parts(self) -> dict:
        """The three operators, resolved on this composite's device if it has one."""
        shape = (self.heads, self.kv_heads, self.head_dim, self.max_seq_len)
        return resolved_parts(
            self,
            lambda: {
                "scores": GQAScores(*shape),
                "softmax": Softmax(rows=self.heads, cols=self.max_seq_len),
                "context": GQAContext(*shape),
            },
        )

    def designs(self) -> dict:
        """The designs of the parts that have one, by role (see `part_designs`)."""
        return part_designs(self)

    def validate(self):
        self.parts()

    def expand(self, g, q, keys, values, *, valid=None):
        parts = self.parts()
        per_call = {} if valid is None else {"valid": valid}
        scores = g(parts["scores"], q, keys, **per_call)
        weights = g(parts["softmax"], scores, **per_call)
        return g(parts["context"], weights, values, **per_call)
