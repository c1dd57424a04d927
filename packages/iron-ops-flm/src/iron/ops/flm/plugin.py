"""The flm family's plugin: names its operators without importing them."""

from iron.core import hookimpl


@hookimpl
def iron_register_operators(register):
    register(
        "FLMGemm",
        "iron.ops.flm.gemm:FLMGemm",
        summary="runtime-shaped GEMM + epilogue, memtile B pool, packed bfp16/bf16 B",
    )
    register(
        "DequantBFP",
        "iron.ops.flm.dequant:DequantBFP",
        summary="q4nx weights to FLMGemm's packed bfp16ebs8 B",
    )
