"""DecodeLayer as an iron-design `Design`: one configuration for the four
layer types and every position, a runtime sequence per call.

The array (npu2), columns 0-3 and one core of column 4 each:

- 16 projection cores (columns 0-3, rows 2-5) run the six projections
  (qkv, o, gate and up, down, the per-layer gate and projection) as
  matrix-vector products. A projection's input vector reaches all of them
  at once (fifo `xb`, a broadcast of CHUNK-value chunks); each keeps it
  whole and multiplies its own ROWS-row tiles of the weight, which its
  column's memtile splits off one stream from DDR: the layer's weights are
  read from DDR exactly once, in the packed order. A round of outputs
  (CORES x ROWS = CHUNK values) travels a chain of neighbouring cores
  (shared memory, no DMA), each adding its rows, to the hub.
- The hub (4, 2) keeps the residual stream in float32, applies the four
  norms, the layer scalar and the per-layer input's GELU, and feeds each
  projection's input; from the gate and up projections the cores keep
  GELU(gate) x up themselves and send it back round by round, which the
  hub relays as the down projection's input.
- The rope core (4, 3) takes the qkv outputs, applies the q/k norms (and
  v's unweighted one) and RoPE from the table row DDR sends, and hands q,
  the new k and v to the attention core and the new k and v to the cache.
- The attention core (4, 4) reads each KV head's cached rows once, from
  two DMA streams, with an online softmax, adds the new key and value
  from the rope core, and sends the context to the hub.

The parameter words say what differs between layer types and calls (rounds
of the qkv and MLP projections, the head dim, the rows read from the
cache, whether the layer writes it); the runtime sequence moves the
buffers: the weights once per column, the vectors, the table row at
context_len, the cache's runs and the new row, y.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from iron.core import bf16
from iron.design import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    Kernel,
    LocalBuffer,
    Loop,
    Memref,
    Obj,
    ObjectFifo,
    Param,
    Release,
    Scalar,
    Simulation,
    Tensor,
    Tile,
    Worker,
    core,
    memtile,
    shim,
    shipped,
    simulate,
    split,
)
from iron.ops.flm import kernel_math as km
from iron.ops.flm.decode_layer import CHUNK, CORES, ROWS, DecodeLayer, core_of
from iron.ops.flm.packing import GROUP
from iron.ops.flm.transfers import rows_tap
from iron.ops.flm.weights import WeightFormat, as_blocks, unpack_rows

SOURCE = "kernels/gemma4_decode.cc"
FIRST_CORE_ROW = 2
HUB, ROPE, ATTENTION = Tile(4, 2), Tile(4, 3), Tile(4, 4)
COLUMNS = CORES // 4

# state words: a projection core's, the hub's, the rope core's, the attention core's
LOAD, KCHUNK, GLU, SEND = range(4)
CURSOR, CTX = range(2)
SUM, INV, SUM_T, INV_T, SCALAR = range(5)
TAKE, VEC, EMIT = range(3)
QTAKE, KCUR, VCUR, OUTCUR = range(4)
M, L, ALPHA, P = range(4)


def head_chunk(op: DecodeLayer) -> int:
    """Values per object of the head-sized streams: a divisor of both head
    dims and of CHUNK."""
    return math.gcd(op.head_dim, op.global_head_dim, CHUNK)


def sizes(op: DecodeLayer) -> dict[str, int]:
    """The configuration's buffer sizes: the largest of any layer type."""
    dmax = max(op.head_dim, op.global_head_dim)
    mlp = op.intermediate * (2 if op.double_wide_mlp else 1)
    return {
        "dmax": dmax,
        "x": max(op.hidden, op.heads * dmax, mlp, op.per_layer),
        "m": mlp // CORES,
        "qkv": (op.heads + 2 * op.kv_heads) * dmax,
    }


# ---- the projection cores' kernels ------------------------------------------------------


def load_model(chunk, x, state, chunks):
    """Chunk `state[LOAD]` of the input vector into x."""
    j = int(state[LOAD])
    x[j * CHUNK : (j + 1) * CHUNK] = chunk
    state[LOAD] = (j + 1) % chunks


def gemv_model(w, x, acc, slot, state, chunks, *, weights: WeightFormat):
    """acc rows of `slot` (ROWS) = (k-chunk 0) or += lane_dot(tile, x chunk)."""
    j = int(state[KCHUNK])
    tile = unpack_rows(w, ROWS, CHUNK, weights)
    part = km.lane_dot(tile, km.f32(x[j * CHUNK : (j + 1) * CHUNK]))
    rows = acc[slot * ROWS : (slot + 1) * ROWS]
    rows[:] = part if j == 0 else rows + part
    state[KCHUNK] = (j + 1) % chunks


def chain_first_model(out, acc):
    """The chain's first core puts its rows first."""
    out[:ROWS] = acc[:ROWS]


def chain_model(inp, out, acc, place):
    """What the cores before sent, this core's rows at `place`."""
    out[:] = inp
    out[place * ROWS : (place + 1) * ROWS] = acc[:ROWS]


def glu_model(acc, m, state, rounds):
    """A round of gate rows (slot 0) and up rows (slot 1): bf16(gelu(gate) x up)."""
    i = int(state[GLU])
    gate, up = acc[:ROWS], acc[ROWS : 2 * ROWS]
    m[i * ROWS : (i + 1) * ROWS] = km.round_bf16(km.gelu(gate) * up)
    state[GLU] = (i + 1) % rounds


def chain_m_first_model(out, m, state, rounds):
    i = int(state[SEND])
    out[:ROWS] = m[i * ROWS : (i + 1) * ROWS]
    state[SEND] = (i + 1) % rounds


def chain_m_model(inp, out, m, place, state, rounds):
    i = int(state[SEND])
    out[:] = inp
    out[place * ROWS : (place + 1) * ROWS] = m[i * ROWS : (i + 1) * ROWS]
    state[SEND] = (i + 1) % rounds


# ---- the hub's kernels -----------------------------------------------------------------------


def _advance(state, resid_size: int) -> int:
    at = int(state[CURSOR])
    state[CURSOR] = (at + CHUNK) % resid_size
    return at


def hub_load_model(chunk, resid, stats, state, hidden):
    """x chunk into the float32 residual; its squares summed."""
    at = _advance(state, hidden)
    if at == 0:
        stats[SUM] = 0
    resid[at : at + CHUNK] = chunk
    stats[SUM] = np.float32(stats[SUM] + km.lane_dot(chunk, chunk))


def _inverse_rms(total, count, eps_bits) -> np.float32:
    return km.rsqrt(np.float32(total) / np.float32(count) + km.bits_float(eps_bits))


def hub_norm_model(resid, w, out, stats, state, eps_bits, hidden):
    """A chunk of bf16(resid * inv * w), inv = 1/sqrt(mean(resid^2) + eps)."""
    at = _advance(state, hidden)
    if at == 0:
        stats[INV] = _inverse_rms(stats[SUM], hidden, eps_bits)
    out[:] = (resid[at : at + CHUNK] * stats[INV] * km.f32(w)).astype(bf16)


def hub_copy_model(inp, out):
    out[:] = inp


def hub_ctx_model(ctx, out, state, head_chunk):
    """A head-chunk of the context into the input chunk."""
    at = int(state[CTX])
    out[at : at + head_chunk] = ctx
    state[CTX] = (at + head_chunk) % CHUNK


def hub_take_model(g, t, stats, state, hidden):
    """A round of a projection's outputs into t; its squares summed."""
    at = _advance(state, hidden)
    if at == 0:
        stats[SUM_T] = 0
    t[at : at + CHUNK] = g
    stats[SUM_T] = np.float32(stats[SUM_T] + km.lane_dot(g, g))


def hub_residual_model(t, w, resid, stats, state, eps_bits, hidden):
    """resid += t * inv_t * w (t's norm), a chunk; the new residual's squares summed."""
    at = _advance(state, hidden)
    if at == 0:
        stats[INV_T] = _inverse_rms(stats[SUM_T], hidden, eps_bits)
        stats[SUM] = 0
    r = resid[at : at + CHUNK] + t[at : at + CHUNK] * stats[INV_T] * km.f32(w)
    resid[at : at + CHUNK] = r
    stats[SUM] = np.float32(stats[SUM] + km.lane_dot(r, r))


def hub_relay_model(g, out):
    out[:] = km.f32(g).astype(bf16)


def hub_out_model(resid, out, state, hidden):
    at = _advance(state, hidden)
    out[:] = resid[at : at + CHUNK].astype(bf16)


def hub_per_layer_model(g, ple, out):
    """bf16(gelu(per-layer gate) x the token's per-layer input)."""
    out[:] = (km.gelu(km.f32(g)) * km.f32(ple)).astype(bf16)


def hub_scalar_model(chunk, stats):
    stats[SCALAR] = km.f32(chunk[0])


def hub_final_model(t, w, resid, y, stats, state, eps_bits, hidden):
    """y = bf16((resid + t * inv_t * w) x layer scalar)."""
    at = _advance(state, hidden)
    if at == 0:
        stats[INV_T] = _inverse_rms(stats[SUM_T], hidden, eps_bits)
    r = resid[at : at + CHUNK] + t[at : at + CHUNK] * stats[INV_T] * km.f32(w)
    y[:] = (r * stats[SCALAR]).astype(bf16)


def hub_final_plain_model(resid, y, stats, state, hidden):
    at = _advance(state, hidden)
    y[:] = (resid[at : at + CHUNK] * stats[SCALAR]).astype(bf16)


# ---- the rope core's kernels ---------------------------------------------------------------


def rope_take_model(obj, buf, state, rounds):
    i = int(state[TAKE])
    buf[i * CHUNK : (i + 1) * CHUNK] = obj
    state[TAKE] = (i + 1) % rounds


def rope_vector_model(obj, vecs, state, count, head_chunk):
    """q_norm, k_norm and the table row arrive head-chunk by head-chunk."""
    i = int(state[VEC])
    vecs[i * head_chunk : (i + 1) * head_chunk] = obj
    state[VEC] = (i + 1) % count


def _normed(seg, weight, eps_bits) -> np.ndarray:
    inv = _inverse_rms(km.lane_dot(seg, seg), len(seg), eps_bits)
    out = seg * inv
    return out if weight is None else out * weight


def _rotated(x, cos, sin) -> np.ndarray:
    half = len(x) // 2
    first, second = x[:half], x[half:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin])


def rope_prepare_model(buf, vecs, state, dim, kv_new, eps_bits, heads, kv_heads):
    """In place, each rounded to bf16: q's heads normed (q_norm) and
    rotated; with a new key and value, k's normed (k_norm) and rotated,
    v's normed (no weight)."""
    vecs = km.f32(vecs)
    q_norm, k_norm = vecs[:dim], vecs[dim : 2 * dim]
    cos, sin = vecs[2 * dim : 2 * dim + dim // 2], vecs[2 * dim + dim // 2 : 3 * dim]
    heads_of = [(h, q_norm, True) for h in range(heads)]
    if kv_new:
        heads_of += [(heads + g, k_norm, True) for g in range(kv_heads)]
        heads_of += [(heads + kv_heads + g, None, False) for g in range(kv_heads)]
    for h, weight, rotate in heads_of:
        seg = buf[h * dim : (h + 1) * dim]
        out = _normed(km.f32(seg), weight, eps_bits)
        seg[:] = km.round_bf16(_rotated(out, cos, sin) if rotate else out)
    state[EMIT] = 0


def rope_emit_model(buf, out, state, head_chunk):
    i = int(state[EMIT])
    out[:] = buf[i * head_chunk : (i + 1) * head_chunk].astype(bf16)
    state[EMIT] = i + 1


def rope_emit_both_model(buf, out, copy, state, head_chunk):
    i = int(state[EMIT])
    out[:] = copy[:] = buf[i * head_chunk : (i + 1) * head_chunk].astype(bf16)
    state[EMIT] = i + 1


# ---- the attention core's kernels ------------------------------------------------------------


def attention_take_q_model(obj, qbuf, acc, stats, state, count, head_chunk, group, size):
    """A head-chunk of the group's queries; at the first, the group's
    running max (-inf), sum (0) and accumulator (0) start over."""
    i = int(state[QTAKE])
    if i == 0:
        stats[M, :group], stats[L, :group] = -np.inf, 0
        acc[:size] = 0
    qbuf[i * head_chunk : (i + 1) * head_chunk] = obj
    state[QTAKE] = (i + 1) % count


def attention_score_model(k, qbuf, scores, state, dim, head_chunk, group):
    """Each query head's score against one head-chunk of a key (lane_dot),
    summed over the key's chunks."""
    hc = head_chunk
    at = int(state[KCUR]) * hc
    q = km.f32(qbuf[: group * dim]).reshape(group, dim)[:, at : at + hc]
    part = km.lane_dot(q, km.f32(k))
    scores[:] = part if at == 0 else scores + part
    state[KCUR] = (int(state[KCUR]) + 1) % (dim // hc)


def attention_softmax_model(scores, stats, group):
    """The online softmax's step for one key: m' = max(m, s), a = exp(m - m')
    and p = exp(s - m') as bf16, l = l a + p."""
    top = np.maximum(stats[M], scores)
    alpha = km.exp_bf16(stats[M] - top)
    weight = km.exp_bf16(scores - top)
    stats[L] = stats[L] * alpha + weight
    stats[M], stats[ALPHA], stats[P] = top, alpha, weight


def attention_value_model(v, acc, stats, state, dim, head_chunk, group):
    """acc = acc a + p v over one head-chunk of each head's row."""
    hc = head_chunk
    at = int(state[VCUR]) * hc
    rows = acc[: group * dim].reshape(group, dim)[:, at : at + hc]
    rows[:] = rows * stats[ALPHA][:, None] + stats[P][:, None] * km.f32(v)
    state[VCUR] = (int(state[VCUR]) + 1) % (dim // hc)


def attention_out_model(acc, stats, ctx, state, dim, count, head_chunk, group):
    """A head-chunk of the context: bf16(acc x (1 / l))."""
    i = int(state[OUTCUR])
    at = i * head_chunk
    inv = np.float32(1) / np.float32(stats[L][at // dim])
    ctx[:] = (acc[at : at + head_chunk] * inv).astype(bf16)
    state[OUTCUR] = (i + 1) % count


# ---- the kernels ------------------------------------------------------------------------------


def kernels(op: DecodeLayer) -> dict[str, Kernel]:
    source = shipped("iron.ops.flm", SOURCE)
    s, hc = sizes(op), head_chunk(op)
    bfp = op.weights is WeightFormat.BFP16
    chunk_bf, chunk_f = Memref((CHUNK,), "bf16"), Memref((CHUNK,), "f32")
    x, acc, m = Memref((s["x"],), "bf16"), Memref((2 * ROWS,), "f32"), Memref((s["m"],), "f32")
    state, stats = Memref((8,), "i32"), Memref((8,), "f32")
    resid = Memref((op.hidden,), "f32")
    buf, vecs = Memref((s["qkv"],), "f32"), Memref((3 * s["dmax"],), "bf16")
    head = Memref((hc,), "bf16")
    qbuf, gacc = Memref((op.group * s["dmax"],), "bf16"), Memref((op.group * s["dmax"],), "f32")
    astats, scores = Memref((4, op.group), "f32"), Memref((op.group,), "f32")
    tile = Memref((ROWS * CHUNK // GROUP,), "bfp16ebs8") if bfp else Memref((ROWS * CHUNK,), "bf16")
    i32 = Scalar()

    def k(symbol, args, model):
        return Kernel(f"gemma4_{symbol}", args, source, model)

    return {
        "load": k("gemv_load", (chunk_bf, x, state, i32), load_model),
        "gemv": k(
            "gemv_bfp16" if bfp else "gemv_bf16",
            (tile, x, acc, i32, state, i32),
            functools.partial(gemv_model, weights=op.weights),
        ),
        "chain_first": k("chain_first", (chunk_f, acc), chain_first_model),
        "chain": k("chain", (chunk_f, chunk_f, acc, i32), chain_model),
        "glu": k("glu", (acc, m, state, i32), glu_model),
        "chain_m_first": k("chain_m_first", (chunk_f, m, state, i32), chain_m_first_model),
        "chain_m": k("chain_m", (chunk_f, chunk_f, m, i32, state, i32), chain_m_model),
        "hub_load": k("hub_load", (chunk_bf, resid, stats, state, i32), hub_load_model),
        "hub_norm": k(
            "hub_norm", (resid, chunk_bf, chunk_bf, stats, state, i32, i32), hub_norm_model
        ),
        "hub_copy": k("hub_copy", (chunk_f, chunk_f), hub_copy_model),
        "hub_ctx": k("hub_ctx", (head, chunk_bf, state, i32), hub_ctx_model),
        "hub_take": k("hub_take", (chunk_f, resid, stats, state, i32), hub_take_model),
        "hub_residual": k(
            "hub_residual", (resid, chunk_bf, resid, stats, state, i32, i32), hub_residual_model
        ),
        "hub_relay": k("hub_relay", (chunk_f, chunk_bf), hub_relay_model),
        "hub_out": k("hub_out", (resid, chunk_bf, state, i32), hub_out_model),
        "hub_per_layer": k("hub_per_layer", (chunk_f, chunk_bf, chunk_bf), hub_per_layer_model),
        "hub_scalar": k("hub_scalar", (chunk_bf, stats), hub_scalar_model),
        "hub_final": k(
            "hub_final",
            (resid, chunk_bf, resid, chunk_bf, stats, state, i32, i32),
            hub_final_model,
        ),
        "hub_final_plain": k(
            "hub_final_plain", (resid, chunk_bf, stats, state, i32), hub_final_plain_model
        ),
        "rope_take": k("rope_take", (chunk_f, buf, state, i32), rope_take_model),
        "rope_vector": k("rope_vector", (head, vecs, state, i32, i32), rope_vector_model),
        "rope_prepare": k(
            "rope_prepare", (buf, vecs, state, i32, i32, i32, i32, i32), rope_prepare_model
        ),
        "rope_emit": k("rope_emit", (buf, head, state, i32), rope_emit_model),
        "rope_emit_both": k("rope_emit_both", (buf, head, head, state, i32), rope_emit_both_model),
        "take_q": k(
            "attention_take_q",
            (head, qbuf, gacc, astats, state, i32, i32, i32, i32),
            attention_take_q_model,
        ),
        "score": k(
            "attention_score", (head, qbuf, scores, state, i32, i32, i32), attention_score_model
        ),
        "softmax": k("attention_softmax", (scores, astats, i32), attention_softmax_model),
        "value": k(
            "attention_value", (head, gacc, astats, state, i32, i32, i32), attention_value_model
        ),
        "out": k(
            "attention_out", (gacc, astats, head, state, i32, i32, i32, i32), attention_out_model
        ),
    }


# ---- the configuration -------------------------------------------------------------------------


PARAMS = (
    "qkv_rounds",
    "q_chunks",
    "mlp_rounds",
    "head_dim",
    "head_chunks",
    "vector_chunks",
    "q_chunks_all",
    "q_chunks_group",
    "kv_chunks",
    "kv_rows",
    "kv_new",
)


def _chain(ks, p: int, first: str, middle: str, source, *extra) -> list:
    """Core p's step of the output chain: what the cores before it sent,
    passed on with p's rows (from `source`) in place."""
    out = f"chain{p}"
    if p == 0:
        return [Acquire(out), Call(ks[first], (Obj(out), source, *extra)), Release(out)]
    upstream = f"chain{p - 1}"
    call = Call(ks[middle], (Obj(upstream), Obj(out), source, p, *extra))
    return [Acquire(upstream), Acquire(out), call, Release(upstream), Release(out)]


def _projection_body(op, ks, p: int) -> tuple:
    """Projection core p's program for one layer call: per projection, the
    input vector's chunks into x, then per round its tiles of each matrix
    over the chunks and the round's rows down the chain (gate and up: kept
    as GELU(gate) x up, sent back round by round while the down
    projection's input arrives)."""
    col, row = next((c, r) for c in range(COLUMNS) for r in range(4) if core_of(c, r) == p)
    wfifo = f"w{col}_{row}"
    h, mlp = op.hidden // CHUNK, Param("mlp_rounds")  # the hidden vector's chunks (and rounds)

    def load(chunks):
        call = Call(ks["load"], (Obj("xb"), Buf("x"), Buf("state"), chunks))
        return Loop(chunks, [Acquire("xb"), call, Release("xb")])

    def rounds(count, chunks, slots=1, after=()):
        body = []
        for slot in range(slots):
            call = Call(ks["gemv"], (Obj(wfifo), Buf("x"), Buf("acc"), slot, Buf("state"), chunks))
            body.append(Loop(chunks, [Acquire(wfifo), call, Release(wfifo)]))
        return Loop(count, [*body, *after])

    send = _chain(ks, p, "chain_first", "chain", Buf("acc"))
    send_m = _chain(ks, p, "chain_m_first", "chain_m", Buf("m"), Buf("state"), mlp)
    glu = Call(ks["glu"], (Buf("acc"), Buf("m"), Buf("state"), mlp))
    relay_in = [
        Acquire("xb"),
        Call(ks["load"], (Obj("xb"), Buf("x"), Buf("state"), mlp)),
        Release("xb"),
    ]
    body = [
        load(h),
        rounds(Param("qkv_rounds"), h, after=send),
        load(Param("q_chunks")),
        rounds(h, Param("q_chunks"), after=send),
        load(h),
        rounds(mlp, h, slots=2, after=[glu]),
        Loop(mlp, [*send_m, *relay_in]),
        rounds(h, mlp, after=send),
    ]
    if op.per_layer:
        kp = op.per_layer // CHUNK
        body += [load(h), rounds(kp, h, after=send), load(kp), rounds(h, kp, after=send)]
    return tuple(body)


def _hub_body(op, ks) -> tuple:
    eps, hidden = km.float_bits(op.eps), op.hidden
    kh = op.hidden // CHUNK
    state, stats, resid, t = Buf("state"), Buf("stats"), Buf("resid"), Buf("t")
    g = "chain15"

    def norm_out():  # the next projection's input: a norm of the residual
        call = Call(ks["hub_norm"], (resid, Obj("vin"), Obj("xb"), stats, state, eps, hidden))
        return Loop(kh, [Acquire("vin"), Acquire("xb"), call, Release("vin"), Release("xb")])

    def take():  # a projection's outputs, whole, into t
        call = Call(ks["hub_take"], (Obj(g), t, stats, state, hidden))
        return Loop(kh, [Acquire(g), call, Release(g)])

    def residual():  # resid += norm(t)
        call = Call(ks["hub_residual"], (t, Obj("vin"), resid, stats, state, eps, hidden))
        return Loop(kh, [Acquire("vin"), call, Release("vin")])

    hc = head_chunk(op)
    ctx = Loop(
        CHUNK // hc,
        [Acquire("ctx"), Call(ks["hub_ctx"], (Obj("ctx"), Obj("xb"), state, hc)), Release("ctx")],
    )
    body = [
        Loop(kh, [Acquire("vin"), Call(ks["hub_load"], (Obj("vin"), resid, stats, state, hidden)), Release("vin")]),
        norm_out(),
        Loop(Param("qkv_rounds"), [Acquire(g), Acquire("qkv"), Call(ks["hub_copy"], (Obj(g), Obj("qkv"))), Release(g), Release("qkv")]),
        Loop(Param("q_chunks"), [Acquire("xb"), ctx, Release("xb")]),
        take(),
        residual(),
        norm_out(),
        Loop(Param("mlp_rounds"), [Acquire(g), Acquire("xb"), Call(ks["hub_relay"], (Obj(g), Obj("xb"))), Release(g), Release("xb")]),
        take(),
        residual(),
    ]  # fmt: skip
    scalar = [Acquire("vin"), Call(ks["hub_scalar"], (Obj("vin"), stats)), Release("vin")]
    if op.per_layer:
        kp = op.per_layer // CHUNK
        gate = Call(ks["hub_per_layer"], (Obj(g), Obj("vin"), Obj("xb")))
        final = Call(ks["hub_final"], (t, Obj("vin"), resid, Obj("y"), stats, state, eps, hidden))
        body += [
            Loop(kh, [Acquire("xb"), Call(ks["hub_out"], (resid, Obj("xb"), state, hidden)), Release("xb")]),
            Loop(kp, [Acquire(g), Acquire("vin"), Acquire("xb"), gate, Release(g), Release("vin"), Release("xb")]),
            take(),
            *scalar,
            Loop(kh, [Acquire("vin"), Acquire("y"), final, Release("vin"), Release("y")]),
        ]  # fmt: skip
    else:
        final = Call(ks["hub_final_plain"], (resid, Obj("y"), stats, state, hidden))
        body += [*scalar, Loop(kh, [Acquire("y"), final, Release("y")])]
    return tuple(body)


def _rope_body(op, ks) -> tuple:
    eps, hc = km.float_bits(op.eps), head_chunk(op)
    buf, state = Buf("buf"), Buf("state")
    both = Call(ks["rope_emit_both"], (buf, Obj("newk"), Obj("kvw"), state, hc))
    both_v = Call(ks["rope_emit_both"], (buf, Obj("newv"), Obj("kvw"), state, hc))
    return (
        Loop(Param("qkv_rounds"), [Acquire("qkv"), Call(ks["rope_take"], (Obj("qkv"), buf, state, Param("qkv_rounds"))), Release("qkv")]),
        Loop(Param("vector_chunks"), [Acquire("rin"), Call(ks["rope_vector"], (Obj("rin"), Buf("vecs"), state, Param("vector_chunks"), hc)), Release("rin")]),
        Call(ks["rope_prepare"], (buf, Buf("vecs"), state, Param("head_dim"), Param("kv_new"), eps, op.heads, op.kv_heads)),
        Loop(Param("q_chunks_all"), [Acquire("q"), Call(ks["rope_emit"], (buf, Obj("q"), state, hc)), Release("q")]),
        Loop(Param("kv_chunks"), [Acquire("newk"), Acquire("kvw"), both, Release("newk"), Release("kvw")]),
        Loop(Param("kv_chunks"), [Acquire("newv"), Acquire("kvw"), both_v, Release("newv"), Release("kvw")]),
    )  # fmt: skip


def _attention_body(op, ks) -> tuple:
    state, dim, hc, g = Buf("state"), Param("head_dim"), head_chunk(op), op.group
    qbuf, acc, stats, scores = Buf("q"), Buf("acc"), Buf("stats"), Buf("scores")
    size = g * sizes(op)["dmax"]

    def key(kfifo, vfifo):
        return [
            Loop(Param("head_chunks"), [Acquire(kfifo), Call(ks["score"], (Obj(kfifo), qbuf, scores, state, dim, hc, g)), Release(kfifo)]),
            Call(ks["softmax"], (scores, stats, g)),
            Loop(Param("head_chunks"), [Acquire(vfifo), Call(ks["value"], (Obj(vfifo), acc, stats, state, dim, hc, g)), Release(vfifo)]),
        ]  # fmt: skip

    per_group = Param("q_chunks_group")
    group = (
        Loop(per_group, [Acquire("q"), Call(ks["take_q"], (Obj("q"), qbuf, acc, stats, state, per_group, hc, g, size)), Release("q")]),
        Loop(Param("kv_rows"), key("keys", "values")),
        Loop(Param("kv_new"), key("newk", "newv")),
        Loop(per_group, [Acquire("ctx"), Call(ks["out"], (acc, stats, Obj("ctx"), state, dim, per_group, hc, g)), Release("ctx")]),
    )  # fmt: skip
    return group * op.kv_heads


def configuration(op: DecodeLayer) -> tuple:
    """(fifos, links, workers) of the one image every layer type and call runs."""
    ks, s, hc = kernels(op), sizes(op), head_chunk(op)
    bfp = op.weights is WeightFormat.BFP16
    wtype, tile = ("bfp16ebs8", ROWS * CHUNK // GROUP) if bfp else ("bf16", ROWS * CHUNK)
    projections = [f"proj_{p}" for p in range(CORES)]
    fifos = [
        ObjectFifo("xb", (CHUNK,), "bf16", core("hub"), tuple(core(n) for n in projections)),
        ObjectFifo("vin", (CHUNK,), "bf16", shim(), (core("hub"),)),
        ObjectFifo("y", (CHUNK,), "bf16", core("hub"), (shim(),)),
        ObjectFifo("qkv", (CHUNK,), "f32", core("hub"), (core("rope"),)),
        ObjectFifo("rin", (hc,), "bf16", shim(), (core("rope"),)),
        ObjectFifo("q", (hc,), "bf16", core("rope"), (core("attention"),),
                   depth=op.heads * s["dmax"] // hc),
        ObjectFifo("newk", (hc,), "bf16", core("rope"), (core("attention"),),
                   depth=op.kv_heads * s["dmax"] // hc),
        ObjectFifo("newv", (hc,), "bf16", core("rope"), (core("attention"),),
                   depth=op.kv_heads * s["dmax"] // hc),
        ObjectFifo("kvw", (hc,), "bf16", core("rope"), (shim(),)),
        ObjectFifo("keys", (hc,), "bf16", shim(), (core("attention"),)),
        ObjectFifo("values", (hc,), "bf16", shim(), (core("attention"),)),
        ObjectFifo("ctx", (hc,), "bf16", core("attention"), (core("hub"),)),
    ]  # fmt: skip
    links, workers = [], []
    for c in range(COLUMNS):
        fifos.append(ObjectFifo(f"w{c}", (4 * tile,), wtype, shim(), (memtile(f"wsplit{c}"),)))
        parts = [f"w{c}_{r}" for r in range(4)]
        for r, name in enumerate(parts):
            fifos.append(
                ObjectFifo(
                    name, (tile,), wtype, memtile(f"wsplit{c}"), (core(f"proj_{core_of(c, r)}"),)
                )
            )
        links.append(
            split(f"wsplit{c}", f"w{c}", parts, [r * tile for r in range(4)], tile=Tile(c, 1))
        )
    for p in range(CORES):
        after = f"proj_{p + 1}" if p + 1 < CORES else "hub"
        fifos.append(ObjectFifo(f"chain{p}", (CHUNK,), "f32", core(f"proj_{p}"), (core(after),)))
    for c in range(COLUMNS):
        for r in range(4):
            p = core_of(c, r)
            workers.append(
                Worker(
                    f"proj_{p}",
                    _projection_body(op, ks, p),
                    tile=Tile(c, FIRST_CORE_ROW + r),
                    buffers=(
                        LocalBuffer("x", (s["x"],), "bf16"),
                        LocalBuffer("acc", (2 * ROWS,), "f32"),
                        LocalBuffer("m", (s["m"],), "f32"),
                        LocalBuffer("state", (8,), "i32", initial_value=0),
                    ),
                )
            )
    workers += [
        Worker(
            "hub",
            _hub_body(op, ks),
            tile=HUB,
            buffers=(
                LocalBuffer("resid", (op.hidden,), "f32"),
                LocalBuffer("t", (op.hidden,), "f32"),
                LocalBuffer("stats", (8,), "f32"),
                LocalBuffer("state", (8,), "i32", initial_value=0),
            ),
        ),
        Worker(
            "rope",
            _rope_body(op, ks),
            tile=ROPE,
            buffers=(
                LocalBuffer("buf", (s["qkv"],), "f32"),
                LocalBuffer("vecs", (3 * s["dmax"],), "bf16"),
                LocalBuffer("state", (8,), "i32", initial_value=0),
            ),
        ),
        Worker(
            "attention",
            _attention_body(op, ks),
            tile=ATTENTION,
            buffers=(
                LocalBuffer("q", (op.group * s["dmax"],), "bf16"),
                LocalBuffer("acc", (op.group * s["dmax"],), "f32"),
                LocalBuffer("stats", (4, op.group), "f32"),
                LocalBuffer("scores", (op.group,), "f32"),
                LocalBuffer("state", (8,), "i32", initial_value=0),
            ),
        ),
    ]
    return tuple(fifos), tuple(links), tuple(workers)


# ---- one call --------------------------------------------------------------------------------


def params(op: DecodeLayer, context_len: int) -> dict[str, int]:
    """The parameter words of a call at `context_len` of `op`'s layer type."""
    hc, d = head_chunk(op), op.dim
    phases = {p.name: p for p in op.phases()}
    new = 0 if op.is_skip else 1
    return {
        "qkv_rounds": phases["qkv"].rounds,
        "q_chunks": op.heads * d // CHUNK,
        "mlp_rounds": op.mlp // CHUNK,
        "head_dim": d,
        "head_chunks": d // hc,
        "vector_chunks": 3 * d // hc,
        "q_chunks_all": op.heads * d // hc,
        "q_chunks_group": op.group * d // hc,
        "kv_chunks": new * op.kv_heads * d // hc,
        "kv_rows": sum(rows for _, rows in op.read_runs(context_len)),
        "kv_new": new,
    }


def sequence(op: DecodeLayer, context_len: int) -> list:
    """One call's runtime sequence."""
    h, d, kvh = op.hidden, op.dim, op.kv_heads
    per_column = op.weight_elements // COLUMNS // (GROUP if op.weights is WeightFormat.BFP16 else 1)
    out = [Fill(f"w{c}", "weights", TAP.linear(per_column, c * per_column)) for c in range(COLUMNS)]
    out += [Fill("vin", "x"), Fill("vin", "norms", TAP.linear(4 * h))]
    tail = CHUNK + (h if op.per_layer else 0)
    if op.per_layer:
        out.append(Fill("vin", "ple"))
    out.append(Fill("vin", "norms", TAP.linear(tail, 4 * h)))
    out += [
        Fill("rin", "norms", TAP.linear(2 * d, 4 * h + tail)),
        Fill("rin", "rope", TAP.linear(d, context_len * d)),
    ]
    row = kvh * d
    half = op.cache_rows * row
    for part, fifo in ((0, "keys"), (1, "values")):
        for g in range(kvh):
            for slot, rows in op.read_runs(context_len):
                tap = rows_tap(part * half + slot * row + g * d, rows, row, d, op.device)
                out.append(Fill(fifo, "cache", tap))
    if not op.is_skip:
        slot = op.slot(context_len)
        out += [Drain("kvw", "cache", TAP.linear(row, part * half + slot * row)) for part in (0, 1)]
    out.append(Drain("y", "y"))
    return out


def build(op: DecodeLayer, context_len: int | None = None) -> Design:
    """`op`'s design for a call at `context_len` (default: its per-call value)."""
    context_len = op.context_len if context_len is None else context_len
    op.check_call(context_len=context_len)
    fifos, links, workers = configuration(op)
    bfp = op.weights is WeightFormat.BFP16
    tensors = []
    for spec in op.arg_specs():
        if spec.name == "weights" and bfp:
            tensors.append(Tensor("weights", (spec.shape[0],), "bfp16ebs8", spec.direction))
        else:
            tensors.append(Tensor(spec.name, spec.shape, "bf16", spec.direction))
    name = (
        f"gemma4_decode_h{op.hidden}_q{op.heads}x{op.kv_heads}_d{op.head_dim}x{op.global_head_dim}"
        f"_m{op.intermediate}{'w' if op.double_wide_mlp else ''}_p{op.per_layer}_w{op.window}"
        f"_{op.weights.value}"
    )
    return Design(
        name,
        op.device,
        tuple(tensors),
        fifos,
        workers,
        sequence(op, context_len),
        links=links,
        params=PARAMS,
    )


def run(op: DecodeLayer, *inputs, context_len: int) -> Simulation:
    """One call simulated on the layer's inputs (as `reference` takes
    them): `run(...)["y"]`, `["cache"]`, `.traffic`."""
    names = [spec.name for spec in op.arg_specs() if spec.reads]
    tensors = dict(zip(names, inputs))
    tensors["weights"] = as_blocks(tensors["weights"], op.weights)
    return simulate(build(op, context_len), tensors, params(op, context_len))
