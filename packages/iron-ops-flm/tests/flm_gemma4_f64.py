"""Gemma 4 text in float64, written from transformers' definitions
(`modeling_gemma4.py` and `modeling_rope_utils.py`, >= 5.5), independently
of iron.ops.flm: what the operators' float32 references are checked
against. Each function names the transformers piece it follows."""

from __future__ import annotations

import math

import numpy as np
from ml_dtypes import bfloat16 as bf16

EPS = 1e-6


def f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def rms_norm(x, weight=None, eps=EPS):
    """Gemma4RMSNorm: x * pow(mean(x^2) + eps, -0.5), times weight when with_scale."""
    x = f64(x)
    out = x * np.power(np.mean(x**2, axis=-1, keepdims=True) + eps, -0.5)
    return out if weight is None else out * f64(weight)


def gelu_pytorch_tanh(x):
    x = f64(x)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def default_inv_freq(head_dim, theta):
    """compute_default_rope_parameters: 1 / base^(arange(0, dim, 2) / dim)."""
    return 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)


def proportional_inv_freq(head_dim, theta, partial_rotary_factor):
    """_compute_proportional_rope_parameters: rope_angles = int(f * head_dim
    // 2) frequencies 1 / base^(arange(0, 2 angles, 2) / head_dim), then
    zeros to head_dim / 2."""
    angles = int(partial_rotary_factor * head_dim // 2)
    rotated = 1.0 / theta ** (np.arange(0, 2 * angles, 2) / head_dim)
    return np.concatenate([rotated, np.zeros(head_dim // 2 - angles)])


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, position, inv_freq):
    """apply_rotary_pos_emb with emb = cat(freqs, freqs), cos and sin as
    Gemma4TextRotaryEmbedding returns them to a bf16 model (in its dtype)."""
    freqs = position * inv_freq
    emb = np.concatenate([freqs, freqs])
    return f64(x) * stored(np.cos(emb)) + rotate_half(f64(x)) * stored(np.sin(emb))


def inv_freq(layer_global: bool, head_dim: int):
    """Gemma4TextConfig's default rope_parameters per layer type."""
    if layer_global:
        return proportional_inv_freq(head_dim, 1_000_000.0, 0.25)
    return default_inv_freq(head_dim, 10_000.0)


def attention(q, keys, values, query_positions, key_positions, window):
    """eager_attention_forward with scaling 1.0, repeat_kv for the groups,
    the causal (and sliding: 0 <= q - k < window) mask; q (rows, heads, d),
    keys/values (n, kv_heads, d)."""
    q, keys, values = f64(q), f64(keys), f64(values)
    heads, kv_heads = q.shape[1], keys.shape[1]
    group = heads // kv_heads
    qp = np.asarray(query_positions)[:, None]
    kp = np.asarray(key_positions)[None, :]
    allowed = (kp <= qp) & ((qp - kp < window) if window else True)
    out = np.zeros(q.shape)
    for h in range(heads):
        scores = q[:, h] @ keys[:, h // group].T
        scores = np.where(allowed, scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        out[:, h] = weights @ values[:, h // group]
    return out


def decoder_layer(op, x, ple, mats, norms, cache, position):
    """Gemma4TextDecoderLayer.forward for one token at `position` with a
    cache of earlier tokens' keys and values (positions 0..position-1,
    global rows or ring slots): returns (y, k, v), k and v this token's
    (None on a KV-shared layer, which reads the cache only, its own row
    included). As Gemma4TextAttention does, the layer attends over what
    `past_key_values.update` returns: the cache's contents, this token's
    key and value stored in the cache's dtype (bf16) first."""
    d, heads, kv_heads = op.dim, op.heads, op.kv_heads
    freq = inv_freq(op.is_global, d)
    residual = f64(x)
    h = rms_norm(residual, norms["input"])
    q = (f64(mats["q"]) @ h).reshape(heads, d)
    q = apply_rope(rms_norm(q, norms["q_norm"]), position, freq)
    first = 0 if op.is_global else max(0, position + 1 - op.window)
    positions = np.arange(first, position + 1)
    slots = positions if op.is_global else positions % op.window
    keys, values = f64(cache[0, slots]), f64(cache[1, slots])
    k = v = None
    if not op.is_skip:
        k = apply_rope(
            rms_norm((f64(mats["k"]) @ h).reshape(kv_heads, d), norms["k_norm"]), position, freq
        )
        v = rms_norm((f64(mats["v"]) @ h).reshape(kv_heads, d))
        keys[-1], values[-1] = stored(k), stored(v)
    ctx = attention(q[None], keys, values, [position], positions, None).reshape(-1)
    attn = f64(mats["o"]) @ ctx
    residual = residual + rms_norm(attn, norms["post_attention"])
    h2 = rms_norm(residual, norms["pre_feedforward"])
    mlp = f64(mats["down"]) @ (gelu_pytorch_tanh(f64(mats["gate"]) @ h2) * (f64(mats["up"]) @ h2))
    residual = residual + rms_norm(mlp, norms["post_feedforward"])
    if op.per_layer:
        branch = gelu_pytorch_tanh(f64(mats["per_layer_gate"]) @ residual) * f64(ple)
        residual = residual + rms_norm(
            f64(mats["per_layer_projection"]) @ branch, norms["post_per_layer_input"]
        )
    return residual * float(norms["layer_scalar"]), k, v


def stored(x):
    """x as a bf16 cache holds it."""
    return np.asarray(x).astype(np.float32).astype(bf16).astype(np.float64)


def lm_head(x, norm, W, softcap):
    """Gemma4TextModel's final norm, lm_head, final_logit_softcapping."""
    logits = f64(W) @ rms_norm(x, norm)
    if softcap is not None:
        logits = np.tanh(logits / softcap) * softcap
    return logits
