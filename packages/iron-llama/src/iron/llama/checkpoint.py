"""The safetensors reader and writer are iron-lm's (`iron.lm.checkpoint`);
this module keeps `iron.llama.checkpoint` imports working."""

from iron.lm.checkpoint import (
    DTYPES,
    Checkpoint,
    CheckpointError,
    LazyTensor,
    SafetensorsFile,
    TensorInfo,
    write_safetensors,
)

__all__ = [
    "DTYPES",
    "Checkpoint",
    "CheckpointError",
    "LazyTensor",
    "SafetensorsFile",
    "TensorInfo",
    "write_safetensors",
]
