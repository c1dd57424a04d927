"""IRON's matrix family: GEMM, GEMV, attention (MHA for prefill; GQAScores,
GQAContext and the DecodeAttention composite for decode over a KV cache) and
the SwiGLU composites.

Importing this package imports no operator module: `from iron.ops.gemm
import GEMM` imports `iron.ops.gemm.gemm` alone, on first use."""

from importlib import import_module

from iron.ops.gemm.plugin import OPERATORS

_HELPERS = {"padded_seq_len": "mha"}

__all__ = sorted([*OPERATORS, *_HELPERS])


def __getattr__(name: str):
    module = OPERATORS[name][0] if name in OPERATORS else _HELPERS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return [*globals(), *__all__]
