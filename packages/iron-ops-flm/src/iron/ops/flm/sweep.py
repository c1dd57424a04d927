"""The FLMGemm shape sweep: 30 shapes, M from 256 to 16384, K and N from
the projections of Llama 3.2 1B and Gemma 4 E2B (the original IRON
benchmarks FLMGemm on 30 shapes to show one image serving them all). A
benchmark and the dispatch tests take their shapes from here."""

from __future__ import annotations

from types import MappingProxyType

from iron.ops.flm.gemma4 import GEMMA4_E2B

_LLAMA_HIDDEN, _LLAMA_KV, _LLAMA_MLP = 2048, 8 * 64, 8192  # Llama 3.2 1B: 8 KV heads of 64
_E2B = GEMMA4_E2B
_E2B_Q, _E2B_KV = _E2B["heads"] * _E2B["head_dim"], _E2B["kv_heads"] * _E2B["head_dim"]

#: projection -> (K, N)
PROJECTIONS = MappingProxyType(
    {
        "llama3.2-1b q,o": (_LLAMA_HIDDEN, _LLAMA_HIDDEN),
        "llama3.2-1b k,v": (_LLAMA_HIDDEN, _LLAMA_KV),
        "llama3.2-1b gate,up": (_LLAMA_HIDDEN, _LLAMA_MLP),
        "llama3.2-1b down": (_LLAMA_MLP, _LLAMA_HIDDEN),
        "gemma4-e2b q": (_E2B["hidden"], _E2B_Q),
        "gemma4-e2b k,v": (_E2B["hidden"], _E2B_KV),
        "gemma4-e2b o": (_E2B_Q, _E2B["hidden"]),
        "gemma4-e2b gate,up": (_E2B["hidden"], _E2B["intermediate"]),
        "gemma4-e2b down": (_E2B["intermediate"], _E2B["hidden"]),
    }
)

#: 30 distinct M from 256 to 16384: multiples of 256 (a unit of 64 rows on
#: each of npu2's 4 compute rows), dense where prefill chunks are short
M_VALUES = tuple(
    256 * units
    for units in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 32,
                  36, 40, 44, 48, 52, 56, 58, 60, 62, 64)
)  # fmt: skip


def shapes() -> list[tuple[int, int, int]]:
    """(M, K, N) of the sweep: each M with the projections in turn."""
    pairs = list(PROJECTIONS.values())
    return [(m, *pairs[i % len(pairs)]) for i, m in enumerate(M_VALUES)]
