"""Llama 3.2 1B on IRON: the model as one IRON graph function (`Model`), the
model files (config, safetensors checkpoint, tokenizer), a float32 reference
oracle, a seeded sampler, accuracy and determinism checks, and synthetic
checkpoints for tests and demos."""

from iron.llama.checkpoint import Checkpoint, CheckpointError, SafetensorsFile, write_safetensors
from iron.llama.checks import (
    AccuracyBounds,
    AccuracyReport,
    CausalLM,
    DeterminismReport,
    check_accuracy,
    check_determinism,
)
from iron.llama.config import ConfigError, Llama3RopeScaling, LlamaConfig
from iron.llama.graph import llama_graph
from iron.llama.metrics import Metrics
from iron.llama.model import Model
from iron.llama.reference import KVCache, Oracle, OracleModel, rope_inv_freq
from iron.llama.sampling import Sampler
from iron.llama.synthetic import ensure_synthetic, make_synthetic
from iron.llama.tokenizer import Tokenizer, TokenizerError
from iron.llama.weights import LayerWeights, LlamaWeights

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
