"""iron-lm: what every IRON model app shares. Hugging Face checkpoint
directories (config, sharded safetensors read through a mapping whose
pages are handed back, tokenizer files and chat templates), the `CausalLM`
and `Oracle` protocols and `GraphModel` (a model as one IRON graph
function), generation and sampling, accuracy and determinism checks,
metrics, the app CLI and an OpenAI-compatible server."""

from iron.lm.backends import SettingsError, checked_settings, choose_backend
from iron.lm.chat import ChatTemplate, ChatTemplateError
from iron.lm.checkpoint import (
    Checkpoint,
    CheckpointError,
    LazyTensor,
    SafetensorsFile,
    TensorInfo,
    write_safetensors,
)
from iron.lm.checks import (
    AccuracyBounds,
    AccuracyReport,
    DeterminismReport,
    bitwise_equal,
    check_accuracy,
    check_determinism,
    kl_divergence,
)
from iron.lm.config import ConfigError, GenerationConfig
from iron.lm.generation import Completion, NonFiniteLogits, StopStrings, check_fits, complete
from iron.lm.metrics import Metrics, resident_bytes
from iron.lm.model import GraphModel
from iron.lm.protocols import CausalLM, ModelConfig, Oracle, OracleModel
from iron.lm.sampling import Sampler
from iron.lm.tokenizer import TextStream, Tokenizer, TokenizerError

__all__ = [
    "AccuracyBounds",
    "AccuracyReport",
    "CausalLM",
    "ChatTemplate",
    "ChatTemplateError",
    "Checkpoint",
    "CheckpointError",
    "Completion",
    "ConfigError",
    "DeterminismReport",
    "GenerationConfig",
    "GraphModel",
    "LazyTensor",
    "Metrics",
    "ModelConfig",
    "NonFiniteLogits",
    "Oracle",
    "OracleModel",
    "SafetensorsFile",
    "Sampler",
    "SettingsError",
    "StopStrings",
    "TensorInfo",
    "TextStream",
    "Tokenizer",
    "TokenizerError",
    "bitwise_equal",
    "check_accuracy",
    "check_determinism",
    "check_fits",
    "checked_settings",
    "choose_backend",
    "complete",
    "kl_divergence",
    "resident_bytes",
    "write_safetensors",
]
