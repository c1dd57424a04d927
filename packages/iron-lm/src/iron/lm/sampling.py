"""`Sampler`: temperature, top-k and top-p sampling from one row of logits, seeded.

Numerics (so another implementation can match draw for draw): logits / T in
float32; keep every logit >= the k-th largest (ties at the boundary are all
kept, so more than k may survive); softmax of the survivors in float64;
top-p keeps the most probable survivors (ties broken by the lower id) until
their mass reaches p (at least one), renormalised; one uniform u from a
numpy Generator picks searchsorted(cdf, u * cdf[-1], "right") over the kept
ids in id order. Temperature 0 is greedy argmax (the first maximum) and
draws nothing; top_p 1 keeps every survivor and draws as if it were absent.
"""

from __future__ import annotations

import math

import numpy as np


class Sampler:
    """Draw token ids; two samplers with the same seed draw the same tokens
    from the same logits. `top_k=None` keeps the whole vocabulary, `top_p=None`
    (or 1) every token top-k kept."""

    def __init__(
        self,
        temperature: float = 0.7,
        top_k: int | None = 50,
        seed: int | None = None,
        top_p: float | None = None,
    ):
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not (math.isfinite(temperature) and temperature >= 0)
        ):
            raise ValueError(
                f"Sampler: temperature={temperature!r} must be a finite number >= 0 (0 = greedy)"
            )
        if top_k is not None and (
            isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1
        ):
            raise ValueError(
                f"Sampler: top_k={top_k!r} must be a positive integer or None (no limit)"
            )
        if top_p is not None and (
            isinstance(top_p, bool)
            or not isinstance(top_p, (int, float))
            or not (0 < top_p <= 1)  # NaN fails this too
        ):
            raise ValueError(f"Sampler: top_p={top_p!r} must be a number in (0, 1] or None")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(
                f"Sampler: seed={seed!r} must be a non-negative integer or None (fresh entropy)"
            )
        self.temperature = float(temperature)
        self.top_k = top_k
        self.top_p = None if top_p is None or top_p == 1 else float(top_p)
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def __call__(self, logits: np.ndarray) -> int:
        """One token id drawn from the 1-D `logits`."""
        logits = np.asarray(logits)
        if (
            logits.ndim != 1
            or logits.size == 0
            or (logits.dtype.kind not in "fiu" and logits.dtype.name != "bfloat16")
        ):
            raise ValueError(
                f"Sampler: logits must be a non-empty 1-D numeric array, got shape {logits.shape} {logits.dtype}"
            )
        x = logits.astype(np.float32)
        if np.isnan(x).any():
            raise ValueError(
                f"Sampler: logits hold NaN at index {int(np.flatnonzero(np.isnan(x))[0])}"
            )
        if self.temperature == 0:
            return int(np.argmax(x))
        x = x / np.float32(self.temperature)
        if self.top_k is not None and self.top_k < x.size:
            kth = np.partition(x, x.size - self.top_k)[x.size - self.top_k]
            candidates = np.flatnonzero(x >= kth)
        else:
            candidates = np.arange(x.size)
        kept = x[candidates].astype(np.float64)
        if not np.isfinite(kept.max()):
            raise ValueError(
                f"Sampler: the largest logit is {kept.max()}: no finite distribution to draw from"
            )
        weights = np.exp(kept - kept.max())
        if self.top_p is not None:
            order = np.lexsort((candidates, -weights))  # most probable first, then lower id
            mass = np.cumsum(weights[order]) / weights.sum()
            inside = order[: int(np.searchsorted(mass, self.top_p)) + 1]
            chosen = np.sort(inside)
            candidates, weights = candidates[chosen], weights[chosen]
        cdf = np.cumsum(weights)
        index = int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"))
        if index == candidates.size:  # u * total rounded up to the total: the last token with mass
            index = int(np.flatnonzero(weights)[-1])
        return int(candidates[index])
