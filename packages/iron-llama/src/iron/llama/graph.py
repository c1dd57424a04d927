"""The Llama forward as one IRON graph function.

    forward = llama_graph(config, weights, max_seq_len)
    logits = forward(x, angles, pos=pos, last=last)

`x` (rows, hidden) holds the tokens' embeddings (gathered on the host) and
`angles` (rows, head_dim) the RoPE table rows of their positions. One row
records the decode block: the token at position `pos` attends to cache rows
0..pos. More rows record the prefill block: a prompt padded with zero rows
to `rows`, at positions 0..rows-1, whose logits are those of row `last`
(its last layer carries that row alone past the KV caches). Both return
the (vocab,) bf16 logits of one row. `pos` and `last` are per-call values
bound to operators' dispatch-time members, so one compiled decode version
serves every position and one prefill version every prompt length of its
bucket.

Every version shares one arena: the weights (read as shipped, [out, in]:
GEMV's A, GEMM's column-major B) are uploaded once, and the KV caches are
the states `keys.{i}` / `values.{i}` of (max_seq_len, kv_heads, head_dim)
that a prefill version writes and the decode version extends. Padded prompt
rows never reach a real row (attention is causal), and the cache rows they
leave behind are overwritten before a decode reads them (it writes row
`pos`, then reads rows up to `pos`).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from iron.core import bf16
from iron.dispatch import GraphFunction, graph
from iron.llama.config import LlamaConfig
from iron.llama.weights import LayerWeights, LlamaWeights, layer_tensor_name
from iron.ops.eltwise import ElementwiseAdd, ElementwiseMul, RMSNorm, RoPE, SiLU, StridedCopy
from iron.ops.gemm import GEMM, GEMV, MHA, DecodeAttention, SwiGLUDecode

#: MHA's query and key blocks are 64 rows; IRON runs up to 8 pipelines of them
MHA_BLOCK, MHA_PIPELINES = 64, (8, 4, 2, 1)
#: GEMM's rows come in 4 cores x tile_m; 64-row tiles unless the bucket is smaller
GEMM_CORES, GEMM_TILE_M = 4, 64
_FIELDS = tuple(LayerWeights.__dataclass_fields__)


def _head_name(config: LlamaConfig) -> str:
    return "model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight"


def graph_weights(config: LlamaConfig, weights: LlamaWeights) -> dict[str, np.ndarray]:
    """Every weight the graph reads, under its checkpoint name (the tied head
    is the embedding; the graph never reads the embedding otherwise: tokens
    are gathered on the host)."""
    named = {
        layer_tensor_name(i, field): getattr(layer, field)
        for i, layer in enumerate(weights.layers)
        for field in _FIELDS
    }
    return {**named, "model.norm.weight": weights.norm, _head_name(config): weights.head}


def llama_graph(
    config: LlamaConfig,
    weights: LlamaWeights,
    max_seq_len: int,
    *,
    backend: str | None = None,
    device=None,
) -> GraphFunction:
    """The graph function `forward(g, x, angles, *, pos, last)` of this model
    (see the module docstring). Weights must be bf16 (as Llama 3.2 ships)."""
    for name, array in graph_weights(config, weights).items():
        if array.dtype != bf16:
            raise ValueError(
                f"llama_graph: tensor {name!r} is {array.dtype}; the IRON graph reads bf16 "
                "weights (convert the checkpoint to bf16)"
            )
    hidden, vocab = config.hidden_size, config.vocab_size
    kv_shape = (max_seq_len, config.num_key_value_heads, config.head_dim)

    def forward(g, x, angles, *, pos, last):
        rows = x.shape[0]
        final = len(weights.layers) - 1
        for i, layer in enumerate(weights.layers):
            w = {f: g.weight(layer_tensor_name(i, f), getattr(layer, f)) for f in _FIELDS}
            keys, values = g.state(f"keys.{i}", kv_shape), g.state(f"values.{i}", kv_shape)
            if rows == 1:
                x = _decode_layer(g, config, w, x, angles, keys, values, pos)
            elif i < final:
                x = _prefill_layer(g, config, w, x, angles, keys, values, pos)
            else:
                x = _prefill_last_layer(g, config, w, x, angles, keys, values, last)
        x = g(_norm(config, 1), x, g.weight("model.norm.weight", weights.norm))
        return g(GEMV(M=vocab, K=hidden), g.weight(_head_name(config), weights.head), x)

    return graph(forward, name="llama", backend=backend, device=device)


def _norm(config: LlamaConfig, rows: int) -> RMSNorm:
    hidden = config.hidden_size
    return RMSNorm(size=rows * hidden, tile_size=hidden, weighted=True, eps=config.rms_norm_eps)


def _decode_layer(g, config: LlamaConfig, w, x, angles, keys, values, pos):
    """One token at position `pos`: GEMVs, its k and v written into cache row
    `pos`, attention over rows 0..pos."""
    hidden, heads, kv_heads, d = (
        config.hidden_size,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
    )
    max_seq_len, row = keys.shape[0], kv_heads * d
    h = g(_norm(config, 1), x, w["input_norm"])
    q = g(GEMV(M=heads * d, K=hidden), w["q"], h)
    k = g(GEMV(M=row, K=hidden), w["k"], h)
    v = g(GEMV(M=row, K=hidden), w["v"], h)
    q = g(RoPE(rows=heads, cols=d, angle_rows=1), q.reshape(heads, d), angles)
    k = g(RoPE(rows=kv_heads, cols=d, angle_rows=1), k.reshape(kv_heads, d), angles)
    for new, cache in ((k, keys), (v, values)):
        write = StridedCopy(row, max_seq_len * row, sizes=(row,), strides=(1,))
        g(write, new, cache, out_offset=pos * row)
    attention = DecodeAttention(heads, kv_heads, d, max_seq_len)
    context = g(attention, q, keys, values, valid=pos + 1)
    x = g(ElementwiseAdd(size=hidden), x, g(GEMV(M=hidden, K=heads * d), w["o"], context))
    h = g(_norm(config, 1), x, w["post_attention_norm"])
    mlp = g(SwiGLUDecode(hidden, config.intermediate_size), h, w["gate"], w["up"], w["down"])
    return g(ElementwiseAdd(size=hidden), x, mlp).reshape(1, hidden)


def _prefill_last_layer(g, config: LlamaConfig, w, x, angles, keys, values, last):
    """A prefill's last layer: every row's k and v into the caches, then only
    row `last` (the one the head reads) on, as the decode step at position
    `last` (GEMVs for one row instead of every row's GEMMs: a 16-layer
    prefill does ~1/16 less work). That step writes cache row `last` again:
    the same sums, summed in the GEMV's order."""
    rows = x.shape[0]
    h = g(_norm(config, rows), x, w["input_norm"])
    _prefill_kv(g, config, w, h, angles, keys[0:rows], values[0:rows])
    x, angles = (
        _pick_row(g, f"prefill.last_{name}", array, last)
        for name, array in (("row", x), ("angles", angles))
    )
    return _decode_layer(g, config, w, x, angles, keys, values, last)


def _pick_row(g, name: str, array, row):
    """Row `row` (a per-call value) of a 2-D array, copied into state `name`."""
    rows, width = array.shape
    out = g.state(name, (1, width))
    g(StridedCopy(rows * width, width, sizes=(width,), strides=(1,)), array, out,
      in_offset=row * width)  # fmt: skip
    return out


def _prefill_gemm(g, rows: int, a, weight, into=()):
    """a @ weight^T over the weight as shipped ([out, in]: GEMM's column-major B)."""
    # a 64- or 128-row bucket takes 16- or 32-row tiles (npu2's bf16 MAC needs multiples of 16)
    tile_m = min(GEMM_TILE_M, rows // GEMM_CORES)
    gemm = GEMM(M=rows, K=weight.shape[1], N=weight.shape[0], b_col_maj=True, tile_m=tile_m)
    return g(gemm, a, weight, *into)


def _prefill_kv(g, config: LlamaConfig, w, h, angles, keys, values):
    """k (after RoPE) and v of the rows of `h` written straight into cache rows 0..rows-1."""
    rows, kv_heads, d = h.shape[0], config.num_key_value_heads, config.head_dim
    k = _prefill_gemm(g, rows, h, w["k"])
    _prefill_gemm(g, rows, h, w["v"], [values.reshape(rows, kv_heads * d)])
    rope_k = RoPE(rows=rows * kv_heads, cols=d, angle_rows=rows)
    g(rope_k, k.reshape(rows * kv_heads, d), angles, keys.reshape(rows * kv_heads, d))


def _prefill_layer(g, config: LlamaConfig, w, x, angles, keys, values, pos):
    """`rows` positions from 0: GEMMs over the weights as shipped, k (after
    RoPE) and v written straight into cache rows 0..rows-1, causal MHA over
    them."""
    hidden, heads, kv_heads, d = (
        config.hidden_size,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
    )
    rows = x.shape[0]
    keys, values = keys[0:rows], values[0:rows]
    project = partial(_prefill_gemm, g, rows)

    h = g(_norm(config, rows), x, w["input_norm"])
    q = project(h, w["q"])
    _prefill_kv(g, config, w, h, angles, keys, values)
    q = g(RoPE(rows=rows * heads, cols=d, angle_rows=rows), q.reshape(rows * heads, d), angles)
    pipelines = next((p for p in MHA_PIPELINES if rows % (MHA_BLOCK * p) == 0), 1)
    mha = MHA(
        num_heads=heads,
        seq_len=rows,
        head_dim=d,
        num_kv_heads=kv_heads,
        heads_interleaved=True,
        num_pipelines=pipelines,
    )
    context = g(mha, q.reshape(rows, heads, d), keys, values)
    x = g(ElementwiseAdd(size=rows * hidden), x, project(context.reshape(rows, heads * d), w["o"]))
    h = g(_norm(config, rows), x.reshape(rows, hidden), w["post_attention_norm"])
    # SwiGLUPrefill's parts, recorded here so its GEMMs take this bucket's tile_m
    size = rows * config.intermediate_size
    gated = g(SiLU(size=size), project(h, w["gate"]))
    mlp = project(g(ElementwiseMul(size=size), gated, project(h, w["up"])), w["down"])
    return g(ElementwiseAdd(size=rows * hidden), x, mlp).reshape(rows, hidden)
