"""Llama 3.2 1B on IRON: the model as one IRON graph function (`Model`), its
config, weight names and float32 reference oracle, and synthetic
checkpoints for tests and demos. What every model app shares (the
checkpoint reader, tokenizer, sampler, checks, metrics) is iron-lm's,
re-exported here."""

from iron.llama.config import Llama3RopeScaling, LlamaConfig
from iron.llama.graph import llama_graph
from iron.llama.model import Model
from iron.llama.reference import KVCache, Oracle, OracleModel, rope_inv_freq
from iron.llama.synthetic import ensure_synthetic, make_synthetic
from iron.llama.weights import LayerWeights, LlamaWeights
from iron.lm import (
    AccuracyBounds,
    AccuracyReport,
    CausalLM,
    Checkpoint,
    CheckpointError,
    ConfigError,
    DeterminismReport,
    Metrics,
    SafetensorsFile,
    Sampler,
    Tokenizer,
    TokenizerError,
    check_accuracy,
    check_determinism,
    write_safetensors,
)

__all__ = [
    "AccuracyBounds",
    "AccuracyReport",
    "CausalLM",
    "Checkpoint",
    "CheckpointError",
    "ConfigError",
    "DeterminismReport",
    "KVCache",
    "LayerWeights",
    "Llama3RopeScaling",
    "LlamaConfig",
    "LlamaWeights",
    "Metrics",
    "Model",
    "Oracle",
    "OracleModel",
    "SafetensorsFile",
    "Sampler",
    "Tokenizer",
    "TokenizerError",
    "check_accuracy",
    "check_determinism",
    "ensure_synthetic",
    "llama_graph",
    "make_synthetic",
    "rope_inv_freq",
    "write_safetensors",
]
