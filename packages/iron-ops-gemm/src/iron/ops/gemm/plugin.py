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


@hookimpl
def iron_doctor(report):
    """The host kernels' JIT (the cpu backend's): numba's version and how
    many kernels its cache holds, read without importing numba or compiling
    anything (numba's import alone costs more than the rest of the report).
    Absent numba is a problem for speed only: the cpu backend then runs
    references."""
    from importlib.metadata import PackageNotFoundError, version

    from iron.core import settings

    try:
        numba = version("numba")
    except PackageNotFoundError:
        report(
            "host kernels (gemm)",
            "unavailable (numba is not installed): cpu runs references",
            ok=False,
        )
        return
    # where iron.ops.eltwise.host keeps this module's compiled kernels
    cache = settings.current().kernel_cache / "iron.ops.gemm.host"
    cached = len(list(cache.glob("*.nbi")))
    report(
        "host kernels (gemm)",
        f"numba {numba}; {cached} kernel(s) compiled in {cache} (the rest compile on first use)",
    )
