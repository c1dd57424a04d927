"""`Oracle`: an independent float32 numpy Gemma 4 text forward with the
semantics of transformers' `Gemma4ForCausalLM` (`modeling_gemma4.py`, eager
attention), step for step and written from those definitions, not from
IRON's operators:

- the embedding times sqrt(hidden); per-layer inputs (when
  hidden_size_per_layer_input > 0): the per-layer embedding times
  sqrt(per_layer), plus the RMS-normed projection of the embedding times
  hidden^-1/2, the sum times 2^-1/2, one (per_layer,) slice per layer;
- each layer: RMS norm (`norm(x) * w`), q/k RMS norms and RoPE of the
  layer type (default or proportional), v RMS-normed without a scale,
  attention with scaling 1.0 (causal; sliding layers see the last
  `sliding_window` positions), KV-shared layers reusing the keys and values
  of the last earlier layer of their type, the post-attention norm, the
  GELU-tanh MLP (double-wide on shared layers when asked) between the pre-
  and post-feedforward norms, the per-layer-input branch, the layer scalar;
- the final norm, the head, tanh soft-capping.

Weights stay views of the checkpoint and are upcast one matrix at a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from iron.gemma.config import GemmaConfig, inv_frequencies
from iron.gemma.weights import GemmaWeights

__all__ = ["Oracle", "gelu_tanh", "rms_norm"]

_HEAD_ROWS = 16384  # vocabulary rows upcast at once for the head


def f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def rms_norm(x: np.ndarray, weight=None, eps: float = 1e-6) -> np.ndarray:
    """Gemma4RMSNorm in float32: x * (mean(x^2) + eps)^-1/2, times weight when it has one."""
    x = f32(x)
    y = x * (np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) ** np.float32(-0.5)
    return y if weight is None else y * f32(weight)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """transformers' gelu_pytorch_tanh."""
    x = f32(x)
    inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x**3)
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(inner))


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x * cos + rotate_half(x) * sin; x (rows, heads, d), cos/sin (rows, d)."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None] + rotated * sin[:, None]


def _linear(x: np.ndarray, weight) -> np.ndarray:
    return x @ f32(weight).T


class Oracle:
    """Reference logits of a Gemma 4 checkpoint, float32, every position."""

    def __init__(self, config: GemmaConfig, weights: GemmaWeights):
        self.config, self.weights = config, weights

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Oracle:
        config = GemmaConfig.from_file(path)
        checkpoint = GemmaWeights.open_checkpoint(Path(path), config)
        return cls(config, GemmaWeights.load(checkpoint, config))

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """(len(token_ids), vocab) float32: row i predicts token i + 1."""
        c, w = self.config, self.weights
        ids = np.asarray(token_ids, np.int64)
        n, eps = len(ids), c.rms_norm_eps
        x = f32(w.embedding[ids]) * np.float32(math.sqrt(c.hidden_size))
        per_layer = self._per_layer_inputs(ids, x) if c.per_layer else None
        positions = np.arange(n)
        tables = {}
        for kind, rope in c.rope.items():
            dim = c.head_dim if kind == "sliding_attention" else c.global_head_dim
            angle = positions.astype(np.float32)[:, None] * inv_frequencies(rope, dim)[None]
            angle = np.concatenate([angle, angle], axis=-1)
            tables[kind] = (np.cos(angle), np.sin(angle))
        causal = positions[None, :] <= positions[:, None]
        window = positions[:, None] - positions[None, :] < c.sliding_window
        kv: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for i in range(c.num_hidden_layers):
            kind = c.layer_types[i]
            d = c.layer_head_dim(i)
            cos, sin = tables[kind]

            def p(key, i=i):
                return w.layer(i, key)

            residual = x
            h = rms_norm(x, p("input_layernorm.weight"), eps)
            q = _linear(h, p("self_attn.q_proj.weight")).reshape(n, -1, d)
            q = _rotate(rms_norm(q, p("self_attn.q_norm.weight"), eps), cos, sin)
            if c.is_kv_shared(i):
                keys, values = kv[c.kv_source(i)]
            else:
                k = _linear(h, p("self_attn.k_proj.weight")).reshape(n, -1, d)
                keys = _rotate(rms_norm(k, p("self_attn.k_norm.weight"), eps), cos, sin)
                v = _linear(h, p("self_attn.v_proj.weight")).reshape(n, -1, d)
                values = rms_norm(v, None, eps)
                kv[i] = (keys, values)
            seen = causal & window if kind == "sliding_attention" else causal
            attn = _attention(q, keys, values, seen).reshape(n, -1)
            h = rms_norm(_linear(attn, p("self_attn.o_proj.weight")),
                         p("post_attention_layernorm.weight"), eps)  # fmt: skip
            x = residual + h
            residual = x
            h = rms_norm(x, p("pre_feedforward_layernorm.weight"), eps)
            m = gelu_tanh(_linear(h, p("mlp.gate_proj.weight"))) * _linear(
                h, p("mlp.up_proj.weight")
            )
            h = rms_norm(_linear(m, p("mlp.down_proj.weight")),
                         p("post_feedforward_layernorm.weight"), eps)  # fmt: skip
            x = residual + h
            if per_layer is not None:
                residual = x
                g = gelu_tanh(_linear(x, p("per_layer_input_gate.weight"))) * per_layer[:, i]
                h = rms_norm(_linear(g, p("per_layer_projection.weight")),
                             p("post_per_layer_input_norm.weight"), eps)  # fmt: skip
                x = residual + h
            x = x * f32(p("layer_scalar"))
        x = rms_norm(x, w["model.norm.weight"], eps)
        logits = np.empty((n, c.vocab_size), np.float32)
        for start in range(0, c.vocab_size, _HEAD_ROWS):
            logits[:, start : start + _HEAD_ROWS] = _linear(x, w.head[start : start + _HEAD_ROWS])
        cap = c.final_logit_softcapping
        if cap is not None:
            logits = np.tanh(logits / np.float32(cap)) * np.float32(cap)
        return logits

    def _per_layer_inputs(self, ids: np.ndarray, x: np.ndarray) -> np.ndarray:
        """(n, layers, per_layer): Gemma4TextModel.get_per_layer_inputs and
        project_per_layer_inputs."""
        c, w = self.config, self.weights
        n, layers, size = len(ids), c.num_hidden_layers, c.per_layer
        token = f32(w["model.embed_tokens_per_layer.weight"][ids]) * np.float32(math.sqrt(size))
        projected = _linear(x, w["model.per_layer_model_projection.weight"])
        projected = projected * np.float32(c.hidden_size**-0.5)
        projected = rms_norm(projected.reshape(n, layers, size),
                             w["model.per_layer_projection_norm.weight"], c.rms_norm_eps)  # fmt: skip
        return (projected + token.reshape(n, layers, size)) * np.float32(2.0**-0.5)


def _attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Softmax attention, scaling 1.0: q (n, heads, d), keys and values
    (n, kv_heads, d); query head h reads KV head h // (heads / kv_heads)."""
    heads, kv_heads = q.shape[1], keys.shape[1]
    group = heads // kv_heads
    k = np.repeat(keys, group, axis=1)
    v = np.repeat(values, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k)
    scores = np.where(seen[None], scores, np.float32(-np.inf))
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", weights, v).astype(np.float32)
