"""Gemma 4 text (E2B / E4B) on IRON: the model as one IRON graph function on
the FLM operator family (`Model`), its config, weight names and float32
oracle, and synthetic checkpoints for tests and demos. What every model app
shares (the checkpoint reader, tokenizer, sampler, checks, metrics) is
iron-lm's, re-exported here."""

from iron.gemma.config import GemmaConfig, Rope
from iron.gemma.graph import GemmaGraph, gemma_graph
from iron.gemma.model import Model
from iron.gemma.reference import Oracle
from iron.gemma.synthetic import ensure_synthetic, make_synthetic, synthetic_config
from iron.gemma.weights import GemmaWeights
from iron.lm import (
    AccuracyBounds,
    AccuracyReport,
    CausalLM,
    Checkpoint,
    CheckpointError,
    ConfigError,
    DeterminismReport,
    Metrics,
    OracleModel,
    Sampler,
    Tokenizer,
    check_accuracy,
    check_determinism,
)

__all__ = [
    "AccuracyBounds",
    "AccuracyReport",
    "CausalLM",
    "Checkpoint",
    "CheckpointError",
    "ConfigError",
    "DeterminismReport",
    "GemmaConfig",
    "GemmaGraph",
    "GemmaWeights",
    "Metrics",
    "Model",
    "Oracle",
    "OracleModel",
    "Rope",
    "Sampler",
    "Tokenizer",
    "check_accuracy",
    "check_determinism",
    "ensure_synthetic",
    "gemma_graph",
    "make_synthetic",
    "synthetic_config",
]
