"""The Gemma 4 text forward as one IRON graph function on the FLM family.

    forward = gemma_graph(config, packed, max_seq_len, chunk)
    logits = forward(x, ple, begin=..., end=..., last=..., product_rows=...)

`x` (rows, hidden) holds the tokens' scaled embeddings (gathered and scaled
on the host), `ple` (layers, rows, per_layer) their per-layer embeddings
(times sqrt(per_layer) and 2^-1/2: the token half of the per-layer inputs,
gathered on the host; absent without per-layer inputs). Two kinds of
version share one arena, the weights (the RoPE tables among them) and the
KV caches:

- **decode** (rows 1): the token at position `begin`, each layer one
  `DecodeLayer` (it writes its cache row and reads the cache; KV-shared
  layers read their source layer's cache), the head `LMHead`;
- **prefill** (rows `chunk`): query rows [begin, end) of a chunk (multiples
  of 128, end - begin <= chunk), projections by `FLMGemm`, the norms, RoPE,
  GELU and sums by iron-ops-eltwise, attention by `PrefillAttention` /
  `PrefillSlidingAttention` (the source layer writes the cache after its
  queries read it; shared layers read that cache and the source's chunk
  keys), then row `last` of the chunk through `LMHead`. The projections
  compute the chunk's first `product_rows` rows (end - begin rounded up to
  FLMGemm's rows per unit, `GemmaGraph.product_rows`; M bound per call),
  their rows past it zeros: a short last chunk costs its rows, not the
  chunk's.

Caches: a full-attention layer's (2, max_seq_len, kv_heads, global_head_dim),
row p position p; a sliding layer's a ring (2, sliding_window, kv_heads,
head_dim), slot p % window; only layers that compute KV own one.

The per-layer inputs' context half, rms_norm(W x * hidden^-1/2) per layer,
needs no scale: an RMS norm is scale-free but for its eps
(rms_norm_eps(s v) = rms_norm_{eps/s^2}(v)), so prefill norms W x (FLMGemm)
with eps * hidden, exactly. Decode has no plain one-row product in the
family, so it takes LMHead's W rms_norm(x) (the norm weight ones), the same
vector divided by x's rms.

per_layer_projection's depth, the per-layer width (256 in E2B), is below
FLMGemm's 512-deep k-blocks: its prefill product folds f = 512 / per_layer
rows into one, (chunk / f, f * per_layer) @ blockdiag(W^T, ... f times),
which is the same sums (the zero blocks add exact zeros) at f times the
bytes of that one small matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from iron.core import Device, bf16
from iron.dispatch import GraphFunction, graph
from iron.gemma.config import SLIDING, GemmaConfig, inv_frequencies
from iron.gemma.weights import GemmaWeights
from iron.ops.eltwise import AXPY, GELU, ElementwiseAdd, ElementwiseMul, RMSNorm, RoPE, StridedCopy
from iron.ops.flm import (
    DecodeLayer,
    FLMGemm,
    LMHead,
    PrefillAttention,
    PrefillSlidingAttention,
)
from iron.ops.flm.weights import WeightFormat

__all__ = ["CHUNK", "ROUND", "GemmaGraph", "gemma_graph", "rope_table"]

#: prompt rows per prefill call: FastFlowLM's 512-token chunks
CHUNK = 512
#: the prefill attention's positions come in rounds of 128 (L_begin, L_end)
ROUND = 128
#: FLMGemm's k-block: a projection's depth is a multiple of it
K_BLOCK = 512
#: the per-layer input scale (Gemma4TextModel.per_layer_input_scale)
PER_LAYER_INPUT_SCALE = 2.0**-0.5

_PROJECTIONS = {
    "q": "self_attn.q_proj.weight",
    "k": "self_attn.k_proj.weight",
    "v": "self_attn.v_proj.weight",
    "o": "self_attn.o_proj.weight",
    "gate": "mlp.gate_proj.weight",
    "up": "mlp.up_proj.weight",
    "down": "mlp.down_proj.weight",
    "per_layer_gate": "per_layer_input_gate.weight",
    "per_layer_projection": "per_layer_projection.weight",
}


def rope_table(config: GemmaConfig, kind: str, rows: int) -> np.ndarray:
    """(rows, head_dim) float32 [cos | sin] of positions 0..rows-1 for a
    layer type: the angle a float32 product, as transformers computes it."""
    dim = config.head_dim if kind == SLIDING else config.global_head_dim
    angle = np.arange(rows, dtype=np.float32)[:, None] * inv_frequencies(config.rope[kind], dim)
    return np.concatenate([np.cos(angle), np.sin(angle)], axis=1)


def interleaved(table: np.ndarray) -> np.ndarray:
    """A [cos | sin] table in iron-ops-eltwise RoPE's layout [cos, sin, cos, sin, ...]."""
    half = table.shape[1] // 2
    out = np.empty_like(table)
    out[:, 0::2], out[:, 1::2] = table[:, :half], table[:, half:]
    return out


def _bf16(array) -> np.ndarray:
    array = np.asarray(array)
    return array if array.dtype == bf16 else array.astype(np.float32).astype(bf16)


def fold(per_layer: int) -> int:
    """Rows per_layer_projection's prefill product folds into one (see the module docstring)."""
    if per_layer % K_BLOCK == 0:
        return 1
    if K_BLOCK % per_layer:
        raise ValueError(
            f"gemma_graph: hidden_size_per_layer_input={per_layer}: a multiple or a divisor of "
            f"{K_BLOCK} (FLMGemm's k-block)"
        )
    return K_BLOCK // per_layer


@dataclass
class GemmaGraph:
    """The operators and the packed weights of one model at one weight
    format, device, cache length and chunk; `weights` names every array the
    graph reads."""

    config: GemmaConfig
    fmt: WeightFormat
    device: Device
    max_seq_len: int
    chunk: int
    weights: dict[str, np.ndarray]
    #: each layer's layer_scalar (prefill multiplies by it; DecodeLayer reads it from its norms)
    scalars: list[float] = field(default_factory=list)

    @classmethod
    def pack(cls, config: GemmaConfig, weights: GemmaWeights, fmt, device: Device,
             max_seq_len: int, chunk: int = CHUNK) -> GemmaGraph:  # fmt: skip
        """Pack every weight once: each layer's DecodeLayer blob and norms,
        FLMGemm's B of each projection, the LMHead weights, the RoPE tables."""
        fmt = WeightFormat(fmt)
        self = cls(config, fmt, device, max_seq_len, chunk, {})
        c, out = config, self.weights
        for i in range(c.num_hidden_layers):
            decode = self.decode_op(i)

            def w(key, i=i):
                return weights.layer(i, key)

            shared = c.is_kv_shared(i)
            self.scalars.append(float(np.asarray(w("layer_scalar"), np.float32).reshape(-1)[0]))
            mats = {name: (None if shared and name in ("k", "v") else w(key))
                    for name, key in _PROJECTIONS.items()
                    if c.per_layer or not name.startswith("per_layer")}  # fmt: skip
            out[f"layers.{i}.decode.weights"] = decode.pack_weights(**mats)
            out[f"layers.{i}.decode.norms"] = decode.pack_norms(
                w("input_layernorm.weight"), w("post_attention_layernorm.weight"),
                w("pre_feedforward_layernorm.weight"), w("post_feedforward_layernorm.weight"),
                w("self_attn.q_norm.weight"), None if shared else w("self_attn.k_norm.weight"),
                w("post_per_layer_input_norm.weight") if c.per_layer else None,
                w("layer_scalar"),
            )  # fmt: skip
            for name, matrix in mats.items():
                if matrix is None:
                    continue
                op = self.gemm(i, name)
                B = np.asarray(matrix).astype(np.float32).T
                if name == "per_layer_projection" and fold(c.per_layer) > 1:
                    B = np.kron(np.eye(fold(c.per_layer), dtype=np.float32), B)
                out[f"layers.{i}.prefill.{name}"] = op.pack_b(B)
            for key in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                        "post_feedforward_layernorm", "post_per_layer_input_norm",
                        "self_attn.q_norm", "self_attn.k_norm"):  # fmt: skip
                name = f"model.layers.{i}.{key}.weight"
                if name in weights.tensors:
                    out[name] = _bf16(weights[name])
        if c.per_layer:
            size = c.per_layer
            projection = weights["model.per_layer_model_projection.weight"]
            for i in range(c.num_hidden_layers):
                rows = projection[i * size : (i + 1) * size]
                out[f"per_layer.{i}.prefill"] = self.per_layer_gemm().pack_b(
                    np.asarray(rows).astype(np.float32).T
                )
                out[f"per_layer.{i}.decode"] = self.per_layer_head().pack(_bf16(rows))
            out["per_layer.norm"] = _bf16(weights["model.per_layer_projection_norm.weight"])
            out["ones"] = np.ones(c.hidden_size, bf16)
        out["model.norm.weight"] = _bf16(weights["model.norm.weight"])
        in_place = fmt is WeightFormat.BF16 and weights.head.dtype == bf16
        out["head"] = weights.head if in_place else self.head().pack(_bf16(weights.head))
        for kind in set(c.layer_types):
            table = rope_table(c, kind, max_seq_len + chunk)  # a chunk may run past the cache
            out[f"rope.{kind}"] = table[:max_seq_len].astype(bf16)
            out[f"rope.{kind}.interleaved"] = interleaved(table).astype(bf16)
        return self

    # ---- the operators ----

    def decode_op(self, i: int) -> DecodeLayer:
        c = self.config
        kind = "swa" if c.is_sliding(i) else "global"
        return DecodeLayer(
            kind + ("_skip" if c.is_kv_shared(i) else ""), c.hidden_size, c.num_attention_heads,
            c.num_key_value_heads, c.head_dim, c.global_head_dim, c.intermediate_size,
            self.max_seq_len, c.use_double_wide_mlp, c.per_layer, c.sliding_window,
            c.rms_norm_eps, self.fmt,
        )  # fmt: skip

    def gemm(self, i: int, name: str) -> FLMGemm:
        """The prefill product of projection `name` of layer i."""
        c, rows = self.config, self.chunk
        d, heads, kv = c.layer_head_dim(i), c.num_attention_heads, c.num_key_value_heads
        hidden, mlp, per_layer = c.hidden_size, c.intermediate(i), c.per_layer
        k, n = {
            "q": (hidden, heads * d),
            "k": (hidden, kv * d),
            "v": (hidden, kv * d),
            "o": (heads * d, hidden),
            "gate": (hidden, mlp),
            "up": (hidden, mlp),
            "down": (mlp, hidden),
            "per_layer_gate": (hidden, per_layer),
            "per_layer_projection": (per_layer, hidden),
        }[name]
        if name == "per_layer_projection":
            f = fold(per_layer)
            rows, k, n = rows // f, k * f, n * f
        return FLMGemm(M=rows, K=k, N=n, b_format=self.fmt.value).resolve(self.device)

    def per_layer_gemm(self) -> FLMGemm:
        c = self.config
        return FLMGemm(M=self.chunk, K=c.hidden_size, N=c.per_layer,
                       b_format=self.fmt.value).resolve(self.device)  # fmt: skip

    def per_layer_head(self) -> LMHead:
        c = self.config
        return LMHead(dim=c.hidden_size, vocab=c.per_layer, softcap=None, weights=self.fmt,
                      eps=c.rms_norm_eps)  # fmt: skip

    def head(self) -> LMHead:
        c = self.config
        return LMHead(dim=c.hidden_size, vocab=c.vocab_size, softcap=c.final_logit_softcapping,
                      weights=self.fmt, eps=c.rms_norm_eps)  # fmt: skip

    def attention(self, i: int):
        c = self.config
        d, shared = c.layer_head_dim(i), c.is_kv_shared(i)
        common = dict(heads=c.num_attention_heads, kv_heads=c.num_key_value_heads,
                      max_l=self.max_seq_len, head_dim=d, chunk=self.chunk,
                      writes_cache=not shared)  # fmt: skip
        if c.is_sliding(i):
            return PrefillSlidingAttention(window=c.sliding_window, **common)
        return PrefillAttention(**common)

    def cache_shape(self, i: int) -> tuple[int, ...]:
        c = self.config
        rows = c.sliding_window if c.is_sliding(i) else self.max_seq_len
        return (2, rows, c.num_key_value_heads, c.layer_head_dim(i))

    # ---- recording ----

    def product_rows(self, n: int) -> int:
        """The rows a prefill chunk of `n` query rows has its projections
        compute: n rounded up to FLMGemm's M unit (64 x compute rows)."""
        unit = self.gemm(0, "q").unit_rows
        return min(self.chunk, -(-n // unit) * unit)

    def forward(self, g, x, ple, *, begin, end, last, product_rows):
        c = self.config
        w = {name: g.weight(name, array) for name, array in self.weights.items()}
        caches = {
            i: g.state(f"cache.{i}", self.cache_shape(i))
            for i in range(c.num_hidden_layers)
            if not c.is_kv_shared(i)
        }
        if x.shape[0] == 1:
            return self._decode(g, w, caches, x, ple, begin)
        return self._prefill(g, w, caches, x, ple, begin, end, last, product_rows)

    def _decode(self, g, w, caches, x, ple, position):
        c, hidden = self.config, self.config.hidden_size
        x0 = x.reshape(hidden)
        h = x0
        for i in range(c.num_hidden_layers):
            per_layer = []
            if c.per_layer:
                u = g(self.per_layer_head(), x0, w["ones"], w[f"per_layer.{i}.decode"])
                normed = g(self._norm(c.per_layer, 1), u, w["per_layer.norm"])
                scale = AXPY(size=c.per_layer, scalar_factor=PER_LAYER_INPUT_SCALE)
                per_layer = [g(scale, normed, ple[i].reshape(c.per_layer))]
            op = self.decode_op(i)
            args = (h, *per_layer, w[f"layers.{i}.decode.weights"], w[f"layers.{i}.decode.norms"],
                    w[f"rope.{c.layer_types[i]}"], caches[c.kv_source(i)])  # fmt: skip
            result = g(op, *args, context_len=position)
            h = result if c.is_kv_shared(i) else result[1]
        return g(self.head(), h, w["model.norm.weight"], w["head"])

    def _norm(self, width: int, rows: int, weighted=True, eps=None) -> RMSNorm:
        eps = self.config.rms_norm_eps if eps is None else eps
        return RMSNorm(size=rows * width, tile_size=width, weighted=weighted, eps=eps)

    def _angles(self, g, w, kind: str, begin):
        """The eltwise RoPE rows of positions begin..begin+chunk, copied out
        of the layer type's table (a per-call offset)."""
        table = w[f"rope.{kind}.interleaved"]
        rows, d = self.chunk, table.shape[1]
        angles = g.state(f"prefill.angles.{kind}", (rows, d))
        copy = StridedCopy(table.shape[0] * d, rows * d, sizes=(rows, d), strides=(d, 1))
        return g(copy, table.reshape(table.shape[0] * d), angles.reshape(rows * d),
                 in_offset=begin * d, out_offset=0).reshape(rows, d)  # fmt: skip

    def _prefill(self, g, w, caches, x, ple, begin, end, last, product_rows):
        c, rows = self.config, self.chunk
        hidden, heads, kv = c.hidden_size, c.num_attention_heads, c.num_key_value_heads
        angles = {kind: self._angles(g, w, kind, begin) for kind in sorted(set(c.layer_types))}
        zeros = g.state("zeros", (rows * hidden,))  # AXPY's y for the layer scalars
        x0, chunk_kv = x, {}
        for i in range(c.num_hidden_layers):
            d, kind = c.layer_head_dim(i), c.layer_types[i]
            key = f"model.layers.{i}."

            def gemm(name, a, i=i):
                op = self.gemm(i, name)
                # a folded product's rows are a fraction of the chunk's: all computed
                bound = {"M": product_rows} if op.max_M == rows else {}
                return g(op, a, w[f"layers.{i}.prefill.{name}"], **bound)

            def heads_norm(t, n, weight, i=i, d=d):
                op = self._norm(d, rows * n, weighted=weight is not None)
                return g(op, t.reshape(rows * n, d), *([weight] if weight is not None else []))

            rope = {n: RoPE(rows=rows * n, cols=d, angle_rows=rows) for n in {heads, kv}}
            h = g(self._norm(hidden, rows), x, w[key + "input_layernorm.weight"])
            q = heads_norm(gemm("q", h), heads, w[key + "self_attn.q_norm.weight"])
            q = g(rope[heads], q, angles[kind]).reshape(rows, heads, d)
            if c.is_kv_shared(i):
                k, v = chunk_kv[c.kv_source(i)]
            else:
                k = heads_norm(gemm("k", h), kv, w[key + "self_attn.k_norm.weight"])
                k = g(rope[kv], k, angles[kind]).reshape(rows, kv, d)
                v = heads_norm(gemm("v", h), kv, None).reshape(rows, kv, d)
                chunk_kv[i] = (k, v)
            result = g(self.attention(i), q, k, v, caches[c.kv_source(i)], L_begin=begin,
                       L_end=end)  # fmt: skip
            o = result if c.is_kv_shared(i) else result[1]
            a = gemm("o", o.reshape(rows, heads * d))
            a = g(self._norm(hidden, rows), a, w[key + "post_attention_layernorm.weight"])
            x = g(ElementwiseAdd(size=rows * hidden), x, a)
            h = g(self._norm(hidden, rows), x, w[key + "pre_feedforward_layernorm.weight"])
            size = rows * c.intermediate(i)
            m = g(ElementwiseMul(size=size), g(GELU(size=size), gemm("gate", h)), gemm("up", h))
            m = gemm("down", m)
            m = g(self._norm(hidden, rows), m, w[key + "post_feedforward_layernorm.weight"])
            x = g(ElementwiseAdd(size=rows * hidden), x, m)
            if c.per_layer:
                x = self._per_layer_branch(g, w, i, x, x0, ple, gemm, product_rows)
            scalar = self.scalars[i]
            if scalar != 1.0:
                scaled = g(AXPY(size=rows * hidden, scalar_factor=scalar),
                           x.reshape(rows * hidden), zeros)  # fmt: skip
                x = scaled.reshape(rows, hidden)
        row = g.state("prefill.last_row", (hidden,))
        pick = StridedCopy(rows * hidden, hidden, sizes=(hidden,), strides=(1,))
        row = g(pick, x.reshape(rows * hidden), row, in_offset=last * hidden, out_offset=0)
        return g(self.head(), row, w["model.norm.weight"], w["head"])

    def _per_layer_branch(self, g, w, i, x, x0, ple, gemm, product_rows):
        c, rows = self.config, self.chunk
        hidden, size = c.hidden_size, c.per_layer
        key = f"model.layers.{i}."
        projected = g(self.per_layer_gemm(), x0, w[f"per_layer.{i}.prefill"], M=product_rows)
        # rms_norm_eps(W x * hidden^-1/2) is rms_norm_{eps * hidden}(W x)
        eps = c.rms_norm_eps * hidden
        normed = g(self._norm(size, rows, eps=eps), projected, w["per_layer.norm"])
        scale = AXPY(size=rows * size, scalar_factor=PER_LAYER_INPUT_SCALE)
        per_layer = g(scale, normed.reshape(rows * size), ple[i].reshape(rows * size))
        gate = gemm("per_layer_gate", x)
        branch = g(ElementwiseMul(size=rows * size), g(GELU(size=rows * size), gate),
                   per_layer.reshape(rows, size))  # fmt: skip
        f = fold(size)
        branch = gemm("per_layer_projection", branch.reshape(rows // f, f * size))
        branch = g(self._norm(hidden, rows), branch.reshape(rows, hidden),
                   w[key + "post_per_layer_input_norm.weight"])  # fmt: skip
        return g(ElementwiseAdd(size=rows * hidden), x, branch)


def gemma_graph(
    plan: GemmaGraph, *, backend: str | None = None, trace_size: int = 0
) -> GraphFunction:
    """The graph function of a packed model (see the module docstring)."""
    if plan.config.per_layer:

        def gemma(g, x, ple, *, begin, end, last, product_rows):
            return plan.forward(g, x, ple, begin=begin, end=end, last=last,
                                product_rows=product_rows)  # fmt: skip

    else:

        def gemma(g, x, *, begin, end, last, product_rows):
            return plan.forward(g, x, None, begin=begin, end=end, last=last,
                                product_rows=product_rows)  # fmt: skip

    return graph(gemma, name="gemma", backend=backend, device=plan.device, trace_size=trace_size)
