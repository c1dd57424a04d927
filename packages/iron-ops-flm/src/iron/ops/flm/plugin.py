"""The flm family's plugin: names its operators without importing them."""

from iron.core import hookimpl

#: name -> (module under iron.ops.flm, summary)
OPERATORS = {
    "FLMGemm": ("gemm", "runtime-shaped GEMM + epilogue, memtile B pool, packed bfp16/bf16 B"),
    "DequantBFP": ("dequant", "q4nx weights to FLMGemm's packed bfp16ebs8 B"),
    "PrefillAttention": ("prefill_attention", "Gemma 4 global attention of a prompt chunk"),
    "PrefillSlidingAttention": (
        "prefill_sliding_attention",
        "Gemma 4 sliding-window attention of a prompt chunk over a ring",
    ),
    "DecodeLayer": ("decode_layer", "one Gemma 4 decoder layer for one token"),
    "LMHead": ("lm_head", "final norm, logits = x W^T, soft-capped"),
}


@hookimpl
def iron_register_operators(register):
    for name, (module, summary) in OPERATORS.items():
        register(name, f"iron.ops.flm.{module}:{name}", summary=summary)
