"""The accuracy and determinism checks are iron-lm's (`iron.lm.checks`);
this module keeps `iron.llama.checks` imports working."""

from iron.lm.checks import (
    AccuracyBounds,
    AccuracyReport,
    CausalLM,
    DeterminismReport,
    bitwise_equal,
    check_accuracy,
    check_determinism,
    kl_divergence,
    log_softmax,
    logits_broken,
)

__all__ = [
    "AccuracyBounds",
    "AccuracyReport",
    "CausalLM",
    "DeterminismReport",
    "bitwise_equal",
    "check_accuracy",
    "check_determinism",
    "kl_divergence",
    "log_softmax",
    "logits_broken",
]
