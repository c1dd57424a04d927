"""Accuracy and determinism checks over any model with the `CausalLM` protocol.

Accuracy is teacher-forced: the oracle and the model are fed the same
tokens (the oracle's greedy choice at every step), so one early mismatch
cannot derail the rest of the comparison. Each step records
KL(oracle || model) from float64 log-softmax and whether the two argmaxes
agree. Determinism alternates two different prompts for several rounds and
compares every logit bitwise with the first round of the same prompt:
state leaking from one prompt into the next (a stale cache, an unflushed
buffer) shows up as a difference, and so do NaN payloads and signed zeros.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from iron.lm.protocols import CausalLM


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-softmax of a 1-D logit row."""
    x = np.asarray(logits).astype(np.float64)
    shifted = x - x.max()
    return shifted - np.log(np.exp(shifted).sum())


def logits_broken(logits: np.ndarray) -> bool:
    """Whether a logit row holds NaN or +Inf, or nothing but -Inf: no
    distribution comes from it. A -Inf among finite logits is a masked
    token (probability 0), not a fault."""
    x = np.asarray(logits)
    return bool(np.isnan(x).any() or np.isposinf(x).any() or np.isneginf(x).all())


def kl_divergence(reference_logits: np.ndarray, model_logits: np.ndarray) -> float:
    """KL(softmax(reference) || softmax(model)) in nats, computed in float64;
    NaN when either row is broken (`logits_broken`): a NaN reference would
    otherwise give a softmax of NaN, no term with p > 0, and a KL of 0."""
    if np.shape(reference_logits) != np.shape(model_logits):
        raise ValueError(
            f"kl_divergence: logit shapes differ: reference {np.shape(reference_logits)}, "
            f"model {np.shape(model_logits)}"
        )
    if logits_broken(reference_logits) or logits_broken(model_logits):
        return float("nan")
    log_p, log_q = log_softmax(reference_logits), log_softmax(model_logits)
    p = np.exp(log_p)
    support = p > 0  # terms with p == 0 contribute 0, even where log q is -inf
    return float(np.sum(p[support] * (log_p[support] - log_q[support])))


@dataclass(frozen=True)
class AccuracyBounds:
    """Pass bounds on the per-step KL (nats); the defaults are IRON's Llama bounds."""

    mean_kl: float = 0.02
    p90_kl: float = 0.04
    max_kl: float = 0.2

    def __post_init__(self) -> None:
        # a NaN bound compares false with everything: every KL would pass it
        for name in ("mean_kl", "p90_kl", "max_kl"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
                raise TypeError(f"AccuracyBounds: {name}={value!r}: a number of nats")
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"AccuracyBounds: {name}={value!r}: a finite number >= 0 (nats)")


@dataclass(frozen=True)
class AccuracyReport:
    """Per-step figures of `check_accuracy`; step 0 is the prefill's last position."""

    kl: tuple[float, ...]
    oracle_tokens: tuple[int, ...]
    model_tokens: tuple[int, ...]
    bounds: AccuracyBounds = field(default_factory=AccuracyBounds)
    #: (step, "oracle" or "model") for every side whose logits were broken
    #: (NaN, +Inf or all -Inf; see `logits_broken`)
    nonfinite: tuple[tuple[int, str], ...] = ()

    @property
    def mean_kl(self) -> float:
        return float(np.mean(self.kl))

    @property
    def p90_kl(self) -> float:
        return float(np.percentile(self.kl, 90))

    @property
    def max_kl(self) -> float:
        return float(np.max(self.kl))

    @property
    def max_kl_step(self) -> int:
        return int(np.argmax(self.kl))

    @property
    def top1_mismatches(self) -> tuple[int, ...]:
        """Steps where the model's argmax differs from the oracle's."""
        return tuple(
            i
            for i, (a, b) in enumerate(zip(self.oracle_tokens, self.model_tokens, strict=True))
            if a != b
        )

    @property
    def failures(self) -> list[str]:
        """One line per broken bound; non-finite logits on either side fail
        outright."""
        lines = []
        for side, cause in (
            ("oracle", "the checkpoint's weights hold NaN or Inf (the oracle only reads them)"),
            ("model", "the model computed NaN or Inf"),
        ):
            steps = [step for step, which in self.nonfinite if which == side]
            if steps:
                lines.append(f"the {side}'s logits are not finite from step {steps[0]}: {cause}")
        if lines:
            return lines
        if np.isnan(self.kl).any():
            first = int(np.flatnonzero(np.isnan(self.kl))[0])
            return [f"KL is NaN from step {first}: the model's logits are not finite"]
        figures = [
            ("mean", self.mean_kl, self.bounds.mean_kl),
            ("p90", self.p90_kl, self.bounds.p90_kl),
            (f"max (step {self.max_kl_step})", self.max_kl, self.bounds.max_kl),
        ]
        return [
            f"{name} KL {value:.4g} > {bound:g}" for name, value, bound in figures if value > bound
        ]

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        """The figures as plain data (`--json`)."""
        return {
            "check": "accuracy",
            "passed": self.passed,
            "steps": len(self.kl),
            "mean_kl": _finite(self.mean_kl),
            "p90_kl": _finite(self.p90_kl),
            "max_kl": _finite(self.max_kl),
            "max_kl_step": self.max_kl_step,
            "bounds": dataclasses.asdict(self.bounds),
            "top1_mismatches": list(self.top1_mismatches),
            "kl": [_finite(k) for k in self.kl],
            "oracle_tokens": list(self.oracle_tokens),
            "model_tokens": list(self.model_tokens),
            "failures": self.failures,
        }

    def summary(self) -> str:
        mismatches = self.top1_mismatches
        lines = [
            f"accuracy over {len(self.kl)} teacher-forced steps: {'PASS' if self.passed else 'FAIL'}",
            f"  KL mean {self.mean_kl:.4g} (<= {self.bounds.mean_kl:g})",
            f"  KL p90  {self.p90_kl:.4g} (<= {self.bounds.p90_kl:g})",
            f"  KL max  {self.max_kl:.4g} at step {self.max_kl_step} (<= {self.bounds.max_kl:g})",
            f"  top-1 mismatches {len(mismatches)}/{len(self.kl)}"
            + (f" at steps {list(mismatches)}" if mismatches else ""),
        ]
        return "\n".join(lines + [f"  failed: {line}" for line in self.failures])


def check_accuracy(
    oracle: CausalLM,
    model: CausalLM,
    prompt: Sequence[int],
    steps: int = 40,
    bounds: AccuracyBounds = AccuracyBounds(),
) -> AccuracyReport:
    """Compare `model` with `oracle` over `steps` positions (the prompt's last,
    then steps - 1 decodes of the oracle's greedy token). Both are reset first."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"check_accuracy: steps={steps!r} must be >= 1 (an int)")
    if not isinstance(bounds, AccuracyBounds):
        raise TypeError(
            f"check_accuracy: bounds must be AccuracyBounds, got {type(bounds).__name__}"
        )
    if len(prompt) == 0:
        raise ValueError("check_accuracy: the prompt must hold at least one token")
    oracle.reset()
    model.reset()
    kl, oracle_tokens, model_tokens, nonfinite = [], [], [], []
    expected, got = oracle.prefill(prompt), model.prefill(prompt)
    for step in range(steps):
        for side, logits in (("oracle", expected), ("model", got)):
            if logits_broken(logits):
                nonfinite.append((step, side))
        kl.append(kl_divergence(expected, got))
        oracle_tokens.append(int(np.argmax(expected)))
        model_tokens.append(int(np.argmax(got)))
        if step + 1 < steps:
            expected, got = oracle.decode(oracle_tokens[-1]), model.decode(oracle_tokens[-1])
    return AccuracyReport(
        tuple(kl), tuple(oracle_tokens), tuple(model_tokens), bounds, tuple(nonfinite)
    )


def _finite(value: float) -> float | None:
    """A figure for JSON, which has no NaN: None where it is NaN."""
    return None if np.isnan(value) else value


def bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes: NaN equals an identical NaN, 0.0 differs from -0.0."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


@dataclass(frozen=True)
class DeterminismReport:
    """Runs of `check_determinism` whose logits differed from the first round of
    the same prompt, as (prompt index, round, first differing step)."""

    rounds: int
    tokens: int
    differing: tuple[tuple[int, int, int], ...]

    @property
    def compared(self) -> int:
        return 2 * (self.rounds - 1)

    @property
    def passed(self) -> bool:
        return not self.differing

    def to_dict(self) -> dict:
        """The figures as plain data (`--json`)."""
        return {
            "check": "determinism",
            "passed": self.passed,
            "rounds": self.rounds,
            "tokens": self.tokens,
            "compared": self.compared,
            "differing": [{"prompt": p, "round": r, "step": s} for p, r, s in self.differing],
        }

    def summary(self) -> str:
        head = (
            f"determinism over {self.rounds} rounds x 2 prompts, {self.tokens} greedy tokens each: "
            f"{'PASS' if self.passed else 'FAIL'}, {len(self.differing)}/{self.compared} runs differ bitwise"
        )
        return "\n".join(
            [head]
            + [
                f"  prompt {p} round {r}: logits differ from round 0 at step {s}"
                for p, r, s in self.differing
            ]
        )


def check_determinism(
    model: CausalLM, prompts: Sequence[Sequence[int]], rounds: int = 5, tokens: int = 4
) -> DeterminismReport:
    """Alternate the two `prompts` for `rounds` rounds; each run resets, prefills
    and decodes greedily until it has `tokens` logit rows, which must equal the
    first round's rows for that prompt bit for bit."""
    if len(prompts) != 2 or list(prompts[0]) == list(prompts[1]):
        raise ValueError("check_determinism: prompts must be two different token sequences")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("check_determinism: each prompt must hold at least one token")
    if rounds < 2 or tokens < 1:
        raise ValueError(
            f"check_determinism: rounds={rounds} must be >= 2 and tokens={tokens} >= 1"
        )
    first: list[list[np.ndarray]] = []
    differing = []
    for round_ in range(rounds):
        for index, prompt in enumerate(prompts):
            model.reset()
            rows = [np.array(model.prefill(prompt))]
            while len(rows) < tokens:
                rows.append(np.array(model.decode(int(np.argmax(rows[-1])))))
            if round_ == 0:
                first.append(rows)
                continue
            step = next(
                (
                    i
                    for i, (a, b) in enumerate(zip(first[index], rows, strict=True))
                    if not bitwise_equal(a, b)
                ),
                None,
            )
            if step is not None:
                differing.append((index, round_, step))
    return DeterminismReport(rounds, tokens, tuple(differing))
