"""The gemm family's entry in the `iron.plugins` group. It names each
operator with its import path as a string, so listing the catalog imports no
operator module."""

from iron.core import hookimpl

#: name -> (module under iron.ops.gemm, summary)
OPERATORS = {
    "GEMM": ("gemm", "C = A @ B; B and C optionally column-major; bf16 or int8 in"),
    "GEMV": ("gemv", "y = A @ x, optionally batched"),
    "MHA": ("mha", "causal (grouped-query) attention over a whole sequence; npu2"),
    "GQAScores": ("gqa_scores", "decode: q . keys / sqrt(d) over a KV cache's valid prefix"),
    "GQAContext": ("gqa_context", "decode: weights x values over a KV cache's valid prefix"),
    "DecodeAttention": ("decode_attention", "composite: GQAScores -> Softmax -> GQAContext"),
    "SwiGLUDecode": ("swiglu_decode", "composite: down(silu(gate(x)) * up(x)) with GEMVs"),
    "SwiGLUPrefill": ("swiglu_prefill", "composite: down(silu(gate(x)) * up(x)) with GEMMs"),
}


@hookimpl
def iron_register_operators(register):
    for name, (module, summary) in OPERATORS.items():
        register(name, f"iron.ops.gemm.{module}:{name}", summary=summary)
