"""What the Gemma 4 operator tests share: devices, random layers, the
simulated and host runs and their comparison."""

from __future__ import annotations

import attrs
import numpy as np

from iron.core import Device, Tolerance, bf16, compare
from iron.ops.flm.decode_layer import DecodeLayer

NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")
#: the decode layer's scaled-down geometry: every feature at small widths
#: (2 query heads a KV head, head dims 64 and 128, a 128-row window)
SMALL = {
    "hidden": 256,
    "heads": 4,
    "kv_heads": 2,
    "head_dim": 64,
    "global_head_dim": 128,
    "intermediate": 512,
    "double_wide_mlp": True,
    "per_layer": 256,
    "window": 128,
    "max_l": 512,
}


def close_to_exact(actual, exact, scale: float) -> str | None:
    """None when a bf16 result is within a bf16 step of the float64 value
    (2^-7 relative: a value just past a rounding midpoint rounds to the
    other neighbour) plus float32 arithmetic's error (2^-11 of `scale`);
    else what differs."""
    tolerance = Tolerance.relative(2.0**-7, 2.0**-11 * scale)
    verdict = compare(actual, np.asarray(exact).astype(bf16), tolerance)
    return None if verdict.passed else verdict.detail


def rms(x) -> float:
    return float(np.sqrt(np.mean(np.asarray(x, np.float64) ** 2)))


def layer(layer_type: str, **extra) -> DecodeLayer:
    return DecodeLayer(layer_type=layer_type, **{**SMALL, **extra}).resolve(NPU2)


def with_values(op, **values):
    """`op` with its per-call members set (what a call's tolerance reads)."""
    return attrs.evolve(op, **values)


def written(op, inputs, outputs) -> dict[str, np.ndarray]:
    """Outputs by spec name: INOUT ones (updated) and OUT ones, in spec order."""
    names = [s.name for s in op.arg_specs() if s.writes]
    return dict(zip(names, outputs))


def host_run(kernel, op, inputs, **values) -> dict[str, np.ndarray]:
    """A host kernel's outputs by name: its INOUT inputs copied first, its
    OUT buffers filled with NaN (bytes it never wrote cannot pass)."""
    arrays = [np.array(a, copy=True) for a in inputs]
    reads = [s for s in op.arg_specs() if s.reads]
    outs = [np.full(s.shape, np.nan, s.dtype) for s in op.arg_specs() if not s.reads]
    kernel(op, *arrays, *outs, **values)
    updated = [a for a, s in zip(arrays, reads) if s.writes]
    return written(op, inputs, [*updated, *outs])


def random_layer(op, rng, scale_qk=True):
    """A layer's bf16 matrices and norm weights (dicts, transformers'
    shapes) with `example_inputs`' scales, the packed weights and norms,
    x, the per-layer input and a cache of earlier tokens."""
    d, h = op.dim, op.hidden

    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(bf16)

    def near(value, size):
        return (value * (1 + 0.1 * rng.standard_normal(size))).astype(bf16)

    mats = {"q": matrix(op.heads * d, h), "o": matrix(h, op.heads * d)}
    if not op.is_skip:
        mats["k"], mats["v"] = matrix(op.kv_heads * d, h), matrix(op.kv_heads * d, h)
    mats.update(gate=matrix(op.mlp, h), up=matrix(op.mlp, h), down=matrix(h, op.mlp))
    if op.per_layer:
        mats["per_layer_gate"] = matrix(op.per_layer, h)
        mats["per_layer_projection"] = matrix(h, op.per_layer)
    s = d**-0.25 if scale_qk else 1.0
    norms = {
        "input": near(1, h), "post_attention": near(1, h), "pre_feedforward": near(1, h),
        "post_feedforward": near(1, h), "q_norm": near(s, d), "k_norm": near(s, d),
        "layer_scalar": near(1, 1)[0],
    }  # fmt: skip
    if op.per_layer:
        norms["post_per_layer_input"] = near(1, h)
    weights = op.pack_weights(
        mats["q"], mats.get("k"), mats.get("v"), mats["o"], mats["gate"], mats["up"], mats["down"],
        mats.get("per_layer_gate"), mats.get("per_layer_projection"),
    )  # fmt: skip
    packed_norms = op.pack_norms(
        norms["input"], norms["post_attention"], norms["pre_feedforward"],
        norms["post_feedforward"], norms["q_norm"], None if op.is_skip else norms["k_norm"],
        norms.get("post_per_layer_input"), norms["layer_scalar"],
    )  # fmt: skip
    cache = rng.standard_normal((2, op.cache_rows, op.kv_heads, d))
    cache[0] *= s
    x = rng.standard_normal(h).astype(bf16)
    ple = rng.standard_normal(op.per_layer).astype(bf16) if op.per_layer else None
    inputs = [
        x,
        *([ple] if op.per_layer else []),
        weights,
        packed_norms,
        op.rope_table(),
        cache.astype(bf16),
    ]
    return mats, norms, inputs
