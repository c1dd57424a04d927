"""Gemma 4 text numerics the four Gemma operators share, as transformers
(>= 5.5, `modeling_gemma4.py`) defines them, in float32: the RMS norm
(`norm(x) * w`, not `1 + w`), GELU-tanh, RoPE (default and
"proportional"), the attention mask of a layer type and the logit
soft-cap. Also the model geometries of E2B and E4B, and the device rule of
the Gemma kernels.

Each function takes and returns float32 arrays; the operators' references
round once, at their outputs."""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from iron.core import Device, bf16, require

#: eps of every RMS norm of the text model (`Gemma4TextConfig.rms_norm_eps`)
EPS = 1e-6
#: the DecodeLayer layer types: a `_skip` layer is a KV-shared one (one of the
#: last `num_kv_shared_layers`): no k/v projection, it reads the KV of the
#: last earlier layer of the same attention type
LAYER_TYPES = ("global", "swa", "global_skip", "swa_skip")
#: RoPE per attention type (`Gemma4TextConfig.rope_parameters`' defaults):
#: theta, and the proportional RoPE's partial_rotary_factor (None: default RoPE)
ROPE = MappingProxyType({"swa": (10_000.0, None), "global": (1_000_000.0, 0.25)})

#: the geometry a DecodeLayer takes, per model (google/gemma-4-e2b and -e4b's
#: text configs): the swa head_dim and the global one, 8 query heads over 1
#: or 2 KV heads, the MLP width (doubled on KV-shared layers when
#: double_wide_mlp), the per-layer input width and the sliding window
GEMMA4_E2B = MappingProxyType(
    {
        "hidden": 1536,
        "heads": 8,
        "kv_heads": 1,
        "head_dim": 256,
        "global_head_dim": 512,
        "intermediate": 6144,
        "double_wide_mlp": True,
        "per_layer": 256,
        "window": 512,
    }
)
GEMMA4_E4B = MappingProxyType(
    {
        "hidden": 2560,
        "heads": 8,
        "kv_heads": 2,
        "head_dim": 256,
        "global_head_dim": 512,
        "intermediate": 10240,
        "double_wide_mlp": False,
        "per_layer": 256,
        "window": 512,
    }
)
#: the rest of the text configs: 35 layers (4 sliding + 1 full, x7) with the
#: last 20 KV-shared for E2B, 42 (5 + 1, x7) with 18 for E4B; vocabulary,
#: final_logit_softcapping
VOCAB, SOFTCAP = 262144, 30.0


def f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def rms_norm(x, weight=None, eps: float = EPS) -> np.ndarray:
    """x * (mean(x^2) + eps)^-1/2 over the last axis, times `weight` when
    given (Gemma4RMSNorm; with_scale=False has none), float32."""
    x = f32(x)
    inv = (np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) ** np.float32(-0.5)
    y = x * inv
    return y if weight is None else y * f32(weight)


def gelu_tanh(x) -> np.ndarray:
    """transformers' gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x = f32(x)
    inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(inner))


def softcap(z, cap: float) -> np.ndarray:
    """tanh(z / cap) * cap (final_logit_softcapping)."""
    cap = np.float32(cap)
    return np.tanh(f32(z) / cap) * cap


def inv_frequencies(head_dim: int, theta: float, partial_rotary_factor: float | None):
    """RoPE's head_dim/2 inverse frequencies, float32. Default RoPE:
    theta^(-2i/head_dim). Proportional (transformers'
    `_compute_proportional_rope_parameters`): the first
    int(partial_rotary_factor * head_dim // 2) the same, the rest 0, so
    their dimensions pass unrotated."""
    half = head_dim // 2
    angles = half if partial_rotary_factor is None else int(partial_rotary_factor * head_dim // 2)
    exponent = np.arange(0, 2 * angles, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv = np.float32(1) / (np.float32(theta) ** exponent)
    return np.concatenate([inv, np.zeros(half - angles, np.float32)])


def rope_table(rows: int, head_dim: int, theta: float, partial_rotary_factor=None) -> np.ndarray:
    """(rows, head_dim) bf16: row p is [cos(p f) | sin(p f)] over the
    head_dim/2 frequencies f, the angle a float32 product and cos/sin
    rounded to bf16 as transformers' rotary embedding gives them to a bf16
    model (Gemma4TextRotaryEmbedding.forward)."""
    angle = np.arange(rows, dtype=np.float32)[:, None] * inv_frequencies(
        head_dim, theta, partial_rotary_factor
    )
    return np.concatenate([np.cos(angle), np.sin(angle)], axis=1).astype(bf16)


def rotate(x, row) -> np.ndarray:
    """RoPE of x (..., head_dim) by a table row [cos | sin] (head_dim):
    transformers' x * cos + rotate_half(x) * sin, halves paired."""
    x, row = f32(x), f32(row)
    half = x.shape[-1] // 2
    cos, sin = row[:half], row[half:]
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def visible(query_positions, key_positions, window: int | None) -> np.ndarray:
    """Which keys each query sees: causal, and for a sliding layer only the
    last `window` positions (transformers' sliding mask: 0 <= q - k < window)."""
    q = np.asarray(query_positions)[:, None]
    k = np.asarray(key_positions)[None, :]
    seen = k <= q
    return seen if window is None else seen & (q - k < window)


def attend(q, keys, values, seen) -> np.ndarray:
    """Softmax attention with scaling 1.0 (Gemma 4 scales by its q/k norms
    instead): q (rows, heads, d), keys and values (keys, kv_heads, d), seen
    (rows, keys); query head h reads KV head h // (heads / kv_heads). float32;
    a row that sees nothing is 0."""
    q, keys, values = f32(q), f32(keys), f32(values)
    heads, kv_heads = q.shape[1], keys.shape[1]
    group = heads // kv_heads
    out = np.zeros(q.shape, np.float32)
    for g in range(kv_heads):
        hs = slice(g * group, (g + 1) * group)
        scores = np.einsum("rhd,kd->hrk", q[:, hs], keys[:, g])
        scores = np.where(seen[None], scores, np.float32(-np.inf))
        top = scores.max(axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, np.float32(0))
        weights = np.exp(scores - top)
        total = weights.sum(axis=-1, keepdims=True)
        weights = weights / np.where(total > 0, total, np.float32(1))
        out[:, hs] = np.einsum("hrk,kd->rhd", weights, values[:, g])
    return out


def check_aie2p(op, device: Device | None) -> None:
    """The Gemma 4 kernels are aie2p-only, as FastFlowLM's are."""
    if device is not None:
        require(
            op,
            f"device={device.name}",
            device.arch == "aie2p",
            "the Gemma 4 kernels are aie2p-only (npu2), as FastFlowLM's are",
        )
