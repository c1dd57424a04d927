"""`Oracle`: an independent float32 numpy Llama forward with Hugging Face semantics.

It is the accuracy reference for every other implementation, so it is
written plainly and follows transformers' `LlamaForCausalLM` (eager
attention) step for step: rotate-half RoPE with llama3 frequency scaling,
RMSNorm in float32, grouped-query attention (query head h reads kv head
h // group), causal softmax in float32, SwiGLU MLP. Weights stay bf16 views
of the checkpoint and are upcast one matrix at a time, so the 1B model costs
its 2.5 GB mapping plus one float32 matrix rather than 5 GB.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from iron.llama.config import Llama3RopeScaling, LlamaConfig
from iron.llama.weights import LayerWeights, LlamaWeights
from iron.lm.checkpoint import Checkpoint

_HEAD_ROWS = 16384  # vocabulary rows upcast at once for the output head (128 MiB at hidden 2048)


def rope_inv_freq(head_dim: int, theta: float, scaling: Llama3RopeScaling | None) -> np.ndarray:
    """The (head_dim // 2,) float32 RoPE inverse frequencies, llama3-scaled when
    `scaling` is given: computed in float64 per transformers'
    `_compute_llama3_parameters`, rounded to float32 once.

    Wavelength 2*pi/f below original/high_freq_factor: kept; above
    original/low_freq_factor: divided by `factor`; in between, smoothed:
    (1 - s) * f / factor + s * f with s = (original / wavelength - low) / (high - low).
    """
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is not None:
        wavelength = 2 * math.pi / inv_freq
        original = scaling.original_max_position_embeddings
        low, high = scaling.low_freq_factor, scaling.high_freq_factor
        smooth = (original / wavelength - low) / (high - low)
        smoothed = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
        inv_freq = np.where(
            wavelength < original / high,
            inv_freq,
            np.where(wavelength > original / low, inv_freq / scaling.factor, smoothed),
        )
    return inv_freq.astype(np.float32)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """HF LlamaRMSNorm in float32: x * rsqrt(mean(x^2) + eps), then * weight."""
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return x * (np.float32(1) / np.sqrt(variance + np.float32(eps))) * weight.astype(np.float32)


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def _linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """x @ weight.T for a [out, in] weight, upcast to float32 for this call only."""
    return x @ weight.astype(np.float32).T


class KVCache:
    """The keys (after RoPE) and values an `Oracle` has computed so far, one
    float32 (positions, kv_heads, head_dim) array of each per layer."""

    def __init__(self, layers: int):
        self.keys: list[np.ndarray | None] = [None] * layers
        self.values: list[np.ndarray | None] = [None] * layers

    @property
    def length(self) -> int:
        """Positions held."""
        return 0 if self.keys[0] is None else self.keys[0].shape[0]

    def extend(
        self, layer: int, keys: np.ndarray, values: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Append one layer's new rows; return all of its keys and values."""
        if self.keys[layer] is not None:
            keys = np.concatenate([self.keys[layer], keys])
            values = np.concatenate([self.values[layer], values])
        self.keys[layer], self.values[layer] = keys, values
        return keys, values


class Oracle:
    """Float32 reference logits for a Llama checkpoint. `logits(ids)` is
    stateless (every position, no cache); `hidden(ids, cache)` continues a
    sequence held in a `KVCache`, which is what `OracleModel` does."""

    def __init__(self, config: LlamaConfig, weights: LlamaWeights, check_intact=None):
        self.config = config
        self.weights = weights
        # reads every weight from the mapping at every step: a file truncated
        # under it would be SIGBUS, so `check_intact()` runs first (one fstat)
        self.check_intact = check_intact
        self.inv_freq = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Oracle:
        """Load config.json and the (possibly sharded) safetensors of `path`."""
        config = LlamaConfig.from_file(path)
        checkpoint = Checkpoint.open(path)
        return cls(config, LlamaWeights.load(checkpoint, config), checkpoint.check_intact)

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Float32 logits (len(token_ids), vocab_size): row i predicts token i + 1."""
        return self.head(self.hidden(token_ids))

    def head(self, x: np.ndarray) -> np.ndarray:
        """Float32 logits of final hidden states (rows, hidden_size)."""
        head = self.weights.head
        return np.concatenate(
            [_linear(x, head[i : i + _HEAD_ROWS]) for i in range(0, head.shape[0], _HEAD_ROWS)],
            axis=-1,
        )

    def hidden(self, token_ids: Sequence[int], cache: KVCache | None = None) -> np.ndarray:
        """The final-normed float32 hidden states (len(token_ids), hidden_size)
        of `token_ids` at the positions after those `cache` holds (from 0
        without one); their keys and values are appended to `cache`."""
        config = self.config
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(
                f"Oracle: token_ids must be a non-empty 1-D sequence of ints, got {ids!r}"
            )
        if ids.min() < 0 or ids.max() >= config.vocab_size:
            raise ValueError(
                f"Oracle: token ids must lie in [0, {config.vocab_size}), "
                f"got min {ids.min()} max {ids.max()}"
            )
        start = 0 if cache is None else cache.length
        if start + ids.size > config.max_position_embeddings:
            raise ValueError(
                f"Oracle: {start + ids.size} tokens exceed max_position_embeddings={config.max_position_embeddings}"
            )
        if self.check_intact is not None:
            self.check_intact()
        positions = np.arange(start, start + ids.size, dtype=np.float32)
        angles = positions[:, None] * self.inv_freq[None, :]
        angles = np.concatenate([angles, angles], axis=-1)
        cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
        x = self.weights.embedding[ids].astype(np.float32)
        for index, layer in enumerate(self.weights.layers):
            h = rms_norm(x, layer.input_norm, config.rms_norm_eps)
            x = x + self._attention(layer, h, cos, sin, cache, index)
            x = x + self._mlp(layer, rms_norm(x, layer.post_attention_norm, config.rms_norm_eps))
        return rms_norm(x, self.weights.norm, config.rms_norm_eps)

    def _attention(
        self,
        layer: LayerWeights,
        x: np.ndarray,
        cos: np.ndarray,
        sin: np.ndarray,
        cache: KVCache | None,
        index: int,
    ) -> np.ndarray:
        config, n = self.config, x.shape[0]
        d = config.head_dim
        q = _linear(x, layer.q).reshape(n, config.num_attention_heads, d)
        k = _linear(x, layer.k).reshape(n, config.num_key_value_heads, d)
        v = _linear(x, layer.v).reshape(n, config.num_key_value_heads, d)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if cache is not None:  # the cached positions come first
            k, v = cache.extend(index, k, v)
        start = k.shape[0] - n
        # (heads, positions, d): query head h uses kv head h // group_size (contiguous groups)
        group = np.arange(config.num_attention_heads) // config.group_size
        q, k, v = q.transpose(1, 0, 2), k.transpose(1, 0, 2)[group], v.transpose(1, 0, 2)[group]
        scores = (q @ k.transpose(0, 2, 1)) * np.float32(d**-0.5)
        # query i (at position start + i) sees keys 0..start + i
        scores = np.where(np.tri(n, start + n, start, dtype=bool), scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = scores / scores.sum(axis=-1, keepdims=True)
        context = (weights @ v).transpose(1, 0, 2).reshape(n, config.num_attention_heads * d)
        return _linear(context, layer.o)

    def _mlp(self, layer: LayerWeights, x: np.ndarray) -> np.ndarray:
        gate = _linear(x, layer.gate)
        with np.errstate(over="ignore"):  # exp(-x) -> inf for very negative x gives silu = -0
            silu = gate / (np.float32(1) + np.exp(-gate))
        return _linear(silu * _linear(x, layer.up), layer.down)


class OracleModel:
    """The `checks.CausalLM` protocol over an `Oracle` with a KV cache: a
    prefill runs the prompt once and each decode one position (the head only
    for the last row), so a check over a 1B checkpoint costs one pass over
    the weights per step rather than one per position."""

    def __init__(self, oracle: Oracle):
        self.oracle = oracle
        self._cache: KVCache | None = None

    @property
    def length(self) -> int:
        """Tokens in the current sequence (0 before prefill)."""
        return 0 if self._cache is None else self._cache.length

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        self._cache = KVCache(len(self.oracle.weights.layers))
        return self.oracle.head(self.oracle.hidden(token_ids, self._cache)[-1:])[0]

    def decode(self, token_id: int) -> np.ndarray:
        if self._cache is None:
            raise RuntimeError("OracleModel.decode: call prefill first")
        return self.oracle.head(self.oracle.hidden([int(token_id)], self._cache))[0]

    def reset(self) -> None:
        self._cache = None
