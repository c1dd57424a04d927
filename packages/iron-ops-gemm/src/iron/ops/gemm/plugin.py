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
    """The host kernels' JIT (the cpu backend's): threads, what the first
    call cost and where compiled code is cached. Absent numba is a problem
    for speed only: the cpu backend then runs references."""
    try:
        import numba

        from iron.ops.gemm.host import warm_up
    except ImportError as error:
        report("host kernels (gemm)", f"unavailable ({error}): cpu runs references", ok=False)
        return
    info = warm_up()
    how = f"compiled {info['compiled']} kernel(s)" if info["compiled"] else "all cached"
    report(
        "host kernels (gemm)",
        f"numba {numba.__version__}, {info['threads']} threads; first call "
        f"{info['seconds']:.2f} s ({how}); cache {info['cache_dir']}",
    )
