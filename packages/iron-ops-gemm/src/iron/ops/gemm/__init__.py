"""IRON's matrix family: GEMM, GEMV, attention (MHA for prefill; GQAScores,
GQAContext and the DecodeAttention composite for decode over a KV cache) and
the SwiGLU composites.

Importing this package imports no operator module: `from iron.ops.gemm
import GEMM` imports `iron.ops.gemm.gemm` alone, on first use."""

from iron.core.lazy import lazy_exports
from iron.ops.gemm.plugin import OPERATORS

__getattr__, __dir__, __all__ = lazy_exports(
    __name__, {**{name: module for name, (module, _) in OPERATORS.items()}, "padded_seq_len": "mha"}
)
