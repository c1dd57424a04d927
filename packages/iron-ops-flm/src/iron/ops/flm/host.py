"""Host kernels: what the `cpu` backend runs for the Gemma 4 operators
(LMHead, PrefillAttention, PrefillSlidingAttention, DecodeLayer). An
operator names its kernel as a string, ``host = "iron.ops.flm.host:lm_head"``;
the backend imports this module only when it runs one, so numba (the
family's optional ``cpu`` extra) is needed only then. A kernel is
``kernel(op, *arrays, **per_call)`` with the step's arrays in spec order;
it writes its outputs (the cache too, when the operator writes it) in
place.

Numerics are the references': bf16 in, float32 inside, one rounding to
bf16 (nearest even) per output. Weights are read as bf16, two bytes each,
widened in registers (or bfp16ebs8 blocks decoded in registers), so a
token streams each weight once at its stored size; the decode layer walks
its packed blob in place (`DecodeLayer.pack_weights`' order), never
unpacking it.

Every numba loop splits its work over outputs (rows of a projection, heads,
query rows), each reduced by one thread in the compiled loop's order: the
bits are the same for any thread count (``NUMBA_NUM_THREADS``, default every
core) and on every run. Compiled code is cached on disk (``cache=True``);
`warm_up` compiles (or loads) every kernel.
"""

from __future__ import annotations

import time

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from iron.design.block_float import EXPONENT_BIAS
from iron.ops.flm import gemma4
from iron.ops.flm.decode_layer import CHUNK, CORES, ROWS, DecodeLayer
from iron.ops.flm.lm_head import LMHead
from iron.ops.flm.packing import GROUP, GROUP_BYTES
from iron.ops.flm.weights import WeightFormat

#: reassociation lets a reduction vectorize; its order is still the compiled
#: loop's, never the thread count's
_FAST = {"reassoc", "nsz", "arcp"}
#: 2^(E - 133) for each bfp16ebs8 exponent byte, float32 (exact: 2^-133 is a subnormal)
_SCALES = np.ldexp(np.float32(1), np.arange(256) - EXPONENT_BIAS).astype(np.float32)
_SCALES.setflags(write=False)


@intrinsic
def _widen(typingctx, bits):
    """bf16 bits (uint16) -> float32."""

    def codegen(context, builder, signature, args):
        wide = builder.shl(builder.zext(args[0], ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
        return builder.bitcast(wide, ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _bits(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@njit(inline="always", cache=True)
def _round(value):
    """float32 -> bf16 bits, nearest even; NaN stays NaN."""
    bits = _bits(np.float32(value))
    if value != value:
        return np.uint16((bits >> 16) | 0x40)
    return np.uint16((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16)


def _u16(array: np.ndarray) -> np.ndarray:
    return array.view(np.uint16)


def _blocks(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.uint8).reshape(-1, GROUP_BYTES)


# ---- LMHead ---------------------------------------------------------------------------------


@njit(parallel=True, fastmath=_FAST, cache=True)
def _head_bf16(w, h, out, cap):
    rows, dim = w.shape
    for r in prange(rows):
        acc = np.float32(0)
        for k in range(dim):
            acc += _widen(w[r, k]) * h[k]
        if cap > 0:
            acc = np.float32(np.tanh(acc / cap)) * cap
        out[r] = _round(acc)


@njit(parallel=True, fastmath=_FAST, cache=True)
def _head_bfp16(blocks, scales, h, out, cap):
    rows = out.shape[0]
    per_row = h.shape[0] // 8
    for r in prange(rows):
        acc = np.float32(0)
        for b in range(per_row):
            block = blocks[r * per_row + b]
            scale = scales[block[0]]
            part = np.float32(0)
            for i in range(8):
                part += np.float32(np.int8(block[1 + i])) * h[b * 8 + i]
            acc += part * scale
        if cap > 0:
            acc = np.float32(np.tanh(acc / cap)) * cap
        out[r] = _round(acc)


def lm_head(op: LMHead, x, norm, W, logits):
    h = gemma4.rms_norm(x, norm, op.eps)
    cap = np.float32(0 if op.softcap is None else op.softcap)
    if op.weights is WeightFormat.BF16:
        _head_bf16(_u16(W), h, _u16(logits), cap)
    else:
        _head_bfp16(_blocks(W), _SCALES, h, _u16(logits), cap)


# ---- prefill attention --------------------------------------------------------------------


@njit(parallel=True, fastmath=_FAST, cache=True)
def _prefill(q, k, v, cache, o, begin, end, window, ring):
    """o rows begin..end (chunk-relative 0..n) of every head; rows n.. zero."""
    chunk, heads, dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    n = end - begin
    for unit in prange(chunk * heads):
        i, h = unit // heads, unit % heads
        if i >= n:
            for d in range(dim):
                o[i, h, d] = 0
            continue
        g, position = h // group, begin + i
        first = 0 if window == 0 else max(0, position - window + 1)
        count = position + 1 - first
        query = np.empty(dim, np.float32)
        for d in range(dim):
            query[d] = _widen(q[i, h, d])
        scores = np.empty(count, np.float32)
        top = -np.inf
        for j in range(count):
            p = first + j
            acc = np.float32(0)
            if p < begin:
                slot = p % window if ring else p
                for d in range(dim):
                    acc += query[d] * _widen(cache[0, slot, g, d])
            else:
                for d in range(dim):
                    acc += query[d] * _widen(k[p - begin, g, d])
            scores[j] = acc
            top = max(top, acc)
        total = np.float32(0)
        for j in range(count):
            scores[j] = np.exp(scores[j] - top)
            total += scores[j]
        out = np.zeros(dim, np.float32)
        for j in range(count):
            p, weight = first + j, scores[j] / total
            if p < begin:
                slot = p % window if ring else p
                for d in range(dim):
                    out[d] += weight * _widen(cache[1, slot, g, d])
            else:
                for d in range(dim):
                    out[d] += weight * _widen(v[p - begin, g, d])
        for d in range(dim):
            o[i, h, d] = _round(out[d])


def prefill_attention(op, q, k, v, cache, o, *, L_begin, L_end):
    op.check_call(L_begin=L_begin, L_end=L_end)
    window = op.window or 0
    _prefill(_u16(q), _u16(k), _u16(v), _u16(cache), _u16(o), L_begin, L_end, window,
             op.window is not None)  # fmt: skip
    if op.writes_cache:
        cache[...] = op.written(cache, k, v, L_begin, L_end)


# ---- the decode layer -------------------------------------------------------------------------


@njit(inline="always", cache=True)
def _place(p):
    """(column, row) of projection core p (DecodeLayer's core_of, inverted)."""
    column, at = p // 4, p % 4
    return column, (at if column % 2 == 0 else 3 - at)


@njit(parallel=True, fastmath=_FAST, cache=True)
def _project_bf16(rows, column_rows, start, rounds, slots, chunks, x, out):
    """out[s, n] = row n of matrix s of a projection . x, walking the packed
    tiles (`rows`: the blob as CHUNK-value tile rows): one task per (round,
    core), its ROWS rows of every matrix, each a sum of per-chunk sums."""
    for unit in prange(rounds * CORES):
        t, p = np.int64(unit) // CORES, np.int64(unit) % CORES
        column, row = _place(p)
        base = column * column_rows + start
        for s in range(slots):
            for i in range(ROWS):
                acc = np.float32(0)
                for j in range(chunks):
                    r = base + (((t * slots + s) * chunks + j) * 4 + row) * ROWS + i
                    part = np.float32(0)
                    for k in range(CHUNK):
                        part += _widen(rows[r, k]) * x[j * CHUNK + k]
                    acc += part
                out[s, t * CHUNK + p * ROWS + i] = acc


@njit(parallel=True, fastmath=_FAST, cache=True)
def _project_bfp16(rows, scales, column_rows, start, rounds, slots, chunks, x, out):
    """As _project_bf16 over bfp16ebs8 tile rows (CHUNK / 8 blocks of 9 bytes)."""
    per_row = CHUNK // 8
    for unit in prange(rounds * CORES):
        t, p = np.int64(unit) // CORES, np.int64(unit) % CORES
        column, row = _place(p)
        base = column * column_rows + start
        for s in range(slots):
            for i in range(ROWS):
                acc = np.float32(0)
                for j in range(chunks):
                    r = base + (((t * slots + s) * chunks + j) * 4 + row) * ROWS + i
                    for b in range(per_row):
                        part = np.float32(0)
                        for e in range(8):
                            part += (
                                np.float32(np.int8(rows[r, b, 1 + e])) * x[j * CHUNK + b * 8 + e]
                            )
                        acc += part * scales[rows[r, b, 0]]
                out[s, t * CHUNK + p * ROWS + i] = acc


@njit(parallel=True, fastmath=_FAST, cache=True)
def _decode_attention(q, cache, slots, ctx):
    """ctx[h] = softmax over the cached rows `slots` of q[h] . k, times v."""
    heads, dim = q.shape
    kv_heads = cache.shape[2]
    group = heads // kv_heads
    count = slots.shape[0]
    for h in prange(heads):
        g = h // group
        scores = np.empty(count, np.float32)
        top = -np.inf
        for j in range(count):
            acc = np.float32(0)
            for d in range(dim):
                acc += q[h, d] * _widen(cache[0, slots[j], g, d])
            scores[j] = acc
            top = max(top, acc)
        total = np.float32(0)
        for j in range(count):
            scores[j] = np.exp(scores[j] - top)
            total += scores[j]
        for d in range(dim):
            ctx[h, d] = 0
        for j in range(count):
            weight = scores[j] / total
            for d in range(dim):
                ctx[h, d] += weight * _widen(cache[1, slots[j], g, d])


class _Blob:
    """A packed weight blob as CHUNK-value tile rows, and where each
    projection starts in a column (in tile rows)."""

    def __init__(self, op: DecodeLayer, weights) -> None:
        self.bfp = op.weights is WeightFormat.BFP16
        if self.bfp:
            self.rows = _blocks(weights).reshape(-1, CHUNK // GROUP, GROUP_BYTES)
        else:
            self.rows = _u16(weights).reshape(-1, CHUNK)
        self.column = len(self.rows) // 4
        self.starts, at = {}, 0
        for phase in op.phases():
            self.starts[phase.name] = (at, phase)
            at += phase.rows * phase.depth * len(phase.mats) // 4 // CHUNK

    def project(self, name: str, x) -> np.ndarray:
        start, phase = self.starts[name]
        out = np.empty((len(phase.mats), phase.rows), np.float32)
        x = np.ascontiguousarray(x, np.float32)
        args = (self.column, start, phase.rounds, len(phase.mats), phase.chunks, x, out)
        if self.bfp:
            _project_bfp16(self.rows, _SCALES, *args)
        else:
            _project_bf16(self.rows, *args)
        return out


def decode_layer(op: DecodeLayer, x, *rest, context_len):
    """The layer as its reference computes it, the projections and the
    attention in numba, the vector steps in numpy float32."""
    op.check_call(context_len=context_len)
    ple, weights, norms, rope, cache = op.split_inputs(rest[:-1])
    y = rest[-1]
    blob, w, eps = _Blob(op, weights), op.unpack_norms(norms), op.eps
    p, d = context_len, op.dim
    row = rope[p]
    resid = gemma4.f32(x)
    qkv = blob.project("qkv", gemma4.rms_norm(resid, w["input"], eps))[0]
    q = gemma4.rotate(
        gemma4.rms_norm(qkv[: op.heads * d].reshape(op.heads, d), w["q_norm"], eps), row
    )
    if not op.is_skip:
        kv = qkv[op.heads * d :].reshape(2, op.kv_heads, d)
        k = gemma4.rotate(gemma4.rms_norm(kv[0], w["k_norm"], eps), row)
        cache[0, op.slot(p)] = k
        cache[1, op.slot(p)] = gemma4.rms_norm(kv[1], None, eps)
    first = 0 if op.is_global else max(0, p + 1 - op.window)
    slots = np.array([op.slot(pos) for pos in range(first, p + 1)], np.int64)
    ctx = np.empty((op.heads, d), np.float32)
    _decode_attention(np.ascontiguousarray(q), _u16(cache), slots, ctx)
    resid = resid + gemma4.rms_norm(blob.project("o", ctx.reshape(-1))[0], w["post_attention"], eps)
    gate, up = blob.project("gate_up", gemma4.rms_norm(resid, w["pre_feedforward"], eps))
    down = blob.project("down", gemma4.gelu_tanh(gate) * up)[0]
    resid = resid + gemma4.rms_norm(down, w["post_feedforward"], eps)
    if op.per_layer:
        branch = gemma4.gelu_tanh(blob.project("per_layer_gate", resid)[0]) * gemma4.f32(ple)
        projected = blob.project("per_layer_projection", branch)[0]
        resid = resid + gemma4.rms_norm(projected, w["post_per_layer_input"], eps)
    y[...] = (resid * w["layer_scalar"]).astype(y.dtype)


# ---- housekeeping --------------------------------------------------------------------------------


def warm_up() -> dict:
    """Compile (or load from the on-disk cache) every kernel on tiny inputs.
    Returns the seconds it took, how many were compiled, the thread count."""
    started = time.perf_counter()
    out = np.zeros(2, np.uint16)
    h = np.zeros(16, np.float32)
    _head_bf16(np.zeros((2, 16), np.uint16), h, out, np.float32(1))
    _head_bfp16(np.zeros((4, 9), np.uint8), _SCALES, h, out, np.float32(1))
    rows = np.zeros((1, 1, 16), np.uint16)
    _prefill(rows, rows, rows, np.zeros((2, 1, 1, 16), np.uint16), rows.copy(), 0, 1, 0, False)
    tiles = np.zeros((CORES * ROWS, CHUNK), np.uint16)  # one round, one chunk: a tile a core
    x, projected = np.zeros(CHUNK, np.float32), np.zeros((1, CHUNK), np.float32)
    _project_bf16(tiles, len(tiles) // 4, 0, 1, 1, 1, x, projected)
    blocks = np.zeros((CORES * ROWS, CHUNK // GROUP, GROUP_BYTES), np.uint8)
    _project_bfp16(blocks, _SCALES, len(blocks) // 4, 0, 1, 1, 1, x, projected)
    _decode_attention(np.zeros((1, 16), np.float32), np.zeros((2, 1, 1, 16), np.uint16),
                      np.zeros(1, np.int64), np.zeros((1, 16), np.float32))  # fmt: skip
    kernels = (_head_bf16, _head_bfp16, _prefill, _project_bf16, _project_bfp16, _decode_attention)
    return {
        "seconds": time.perf_counter() - started,
        "compiled": sum(bool(k.stats.cache_misses) for k in kernels),
        "threads": numba.get_num_threads(),
    }
