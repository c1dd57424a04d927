"""The eltwise family's entry in the `iron.plugins` group. It names each
operator with its import path as a string, so listing the catalog imports no
operator module."""

from iron.core import hookimpl

#: name -> (module under iron.ops.eltwise, summary)
OPERATORS = {
    "ElementwiseAdd": ("elementwise_add", "y = a + b"),
    "ElementwiseMul": ("elementwise_mul", "y = a * b"),
    "AXPY": ("axpy", "out = scalar_factor * x + y"),
    "ReLU": ("relu", "y = max(x, 0)"),
    "GELU": ("gelu", "y = GELU(x), tanh approximation"),
    "SiLU": ("silu", "y = x * sigmoid(x)"),
    "Sigmoid": ("sigmoid", "y = 1 / (1 + exp(-x))"),
    "Tanh": ("tanh", "y = tanh(x)"),
    "LeakyReLU": ("leaky_relu", "y = x if x >= 0 else alpha * x"),
    "Clamp": ("clamp", "y = min(max(x, lo), hi)"),
    "RMSNorm": ("rms_norm", "row-wise RMS norm, optionally weighted"),
    "LayerNorm": ("layer_norm", "row-wise layer norm (no affine)"),
    "Softmax": ("softmax", "row-wise softmax; columns >= valid are 0"),
    "RoPE": ("rope", "rotary position embedding (two_halves or interleaved)"),
    "MemCopy": ("mem_copy", "y = x"),
    "StridedCopy": ("strided_copy", "gather a strided pattern into a window of the output"),
    "ChunkCopy": ("chunk_copy", "copy the first n chunks, n per call"),
    "Transpose": ("transpose", "y = x.T"),
    "Repeat": ("repeat", "repeat each row `repeat` times (repeat-interleave)"),
    "Dequant": ("dequant", "int4 codes x bf16 group scales -> bf16"),
}


@hookimpl
def iron_register_operators(register):
    for name, (module, summary) in OPERATORS.items():
        register(name, f"iron.ops.eltwise.{module}:{name}", summary=summary)
