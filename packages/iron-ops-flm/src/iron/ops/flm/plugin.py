"""The flm family's plugin: names its operators without importing them."""

from iron.core import hookimpl

#: name -> (module under iron.ops.flm, summary)
OPERATORS = {
    "FLMGemm": ("gemm", "runtime-shaped GEMM + epilogue, memtile B pool, packed bfp16/bf16 B"),
    "DequantBFP": ("dequant", "q4nx weights to FLMGemm's packed bfp16ebs8 B"),
}


@hookimpl
def iron_register_operators(register):
    for name, (module, summary) in OPERATORS.items():
        register(name, f"iron.ops.flm.{module}:{name}", summary=summary)
