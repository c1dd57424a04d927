"""What PrefillAttention and PrefillSlidingAttention share: the attention of
a prompt chunk, rows [L_begin, L_end), over the KV cache and the chunk's
own keys, its per-call validation, reference, tolerance and design.

Layout (bf16): q and o (chunk, heads, head_dim), k and v (chunk, kv_heads,
head_dim), all with the chunk's first row at position L_begin; the cache
(2, rows, kv_heads, head_dim), K then V, rows = max_l for global attention
(row p holds position p) or a ring of `window` rows for sliding attention
(slot p % window). Query row i (position L_begin + i, i < L_end - L_begin)
sees the keys at positions p <= L_begin + i, for sliding attention only the
last `window` of them; a key before L_begin comes from the cache, one from
L_begin on from k and v. Scaling 1.0. Rows of o from L_end - L_begin on
are 0. With `writes_cache` the chunk's keys and values are stored in the
cache (global: rows L_begin..L_end; ring: the last `window` positions) after
every query has read it, so a ring is written by the last call of a
chunk's pass that reads it (KV-shared layers read their source layer's
cache with writes_cache False).

The design: `cores` cores (whole columns) each hold one (query head, block
of BQ rows) unit of a wave; a wave's units share one KV head and a run of
key positions, which stream from DDR once per wave, BK rows at a time,
through a memtile that joins each block's keys and values and broadcasts
them to every core. The wave's query blocks travel the same two streams
first (their halves as the key and value slices), each core keeping its
own. A column's memtile joins its cores' output blocks to DDR. L_begin and
L_end change only the runtime sequence and the parameter words (waves,
key blocks per wave, positions): one configuration serves every range.
"""

from __future__ import annotations

import numpy as np

from iron.core import IN, INOUT, OUT, ArgSpec, Device, OperatorError, Tolerance, bf16, require
from iron.core.numerics import finite_abs
from iron.design import (
    TAP,
    Acquire,
    Buf,
    Call,
    Design,
    Drain,
    Fill,
    Finish,
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
    forward,
    join,
    memtile,
    shim,
    shipped,
    simulate,
)
from iron.ops.flm import gemma4, kernel_math
from iron.ops.flm.gemma4 import check_aie2p
from iron.ops.flm.transfers import rows_tap

#: positions come in rounds of 128: L_begin, L_end, max_l, chunk, window
ROUND = 128
#: elements of a query block (BQ rows x head_dim) and of a key block (BK rows)
Q_ELEMS, K_ELEMS = 4096, 2048
CORES_PER_COLUMN = 4
FIRST_CORE_ROW = 2
SOURCE = "kernels/gemma4_prefill.cc"
#: error of the output against the reference per unit of |v|: the weights
#: are rounded to bf16 (2^-9) and the exp is a bf16 estimate
BUDGET = 2.0**-7


def q_rows(head_dim: int) -> int:
    return Q_ELEMS // head_dim


def k_rows(head_dim: int) -> int:
    return K_ELEMS // head_dim


class PrefillBase:
    """The shared part of the two prefill attention operators (a mixin:
    each subclass is the attrs class with its own fields)."""

    host = "iron.ops.flm.host:prefill_attention"

    @staticmethod
    def arg_spec(heads, kv_heads, head_dim, chunk, cache_rows, writes_cache):
        rows = (chunk, heads, head_dim)
        kv = (chunk, kv_heads, head_dim)
        return [
            ArgSpec("q", rows, bf16, IN),
            ArgSpec("k", kv, bf16, IN),
            ArgSpec("v", kv, bf16, IN),
            ArgSpec(
                "cache", (2, cache_rows, kv_heads, head_dim), bf16, INOUT if writes_cache else IN
            ),
            ArgSpec("o", rows, bf16, OUT),
        ]

    @property
    def cache_rows(self) -> int:
        return self.max_l if self.window is None else self.window

    def runtime_params(self, *, L_begin: int, L_end: int) -> dict[str, int]:
        """The design's derived parameter words for a call's rows (its
        dispatch-time values): what iron-dispatch writes per call."""
        self.check_call(L_begin=L_begin, L_end=L_end)
        return self.schedule().params(L_begin, L_end)

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    # ---- rules ------------------------------------------------------------------------

    def validate(self) -> None:
        require(self, "heads", self.heads > 0 and self.heads % 4 == 0, "a positive multiple of 4")
        require(
            self,
            "kv_heads",
            self.kv_heads > 0 and self.heads % self.kv_heads == 0,
            f"divides heads={self.heads} (query head h reads KV head h // (heads / kv_heads))",
        )
        g = self.group
        require(
            self,
            "kv_heads",
            4 % g == 0 or g % 4 == 0,
            f"heads / kv_heads = {g} must divide or be a multiple of 4 (a column's 4 cores take "
            "whole heads of one query block, or whole blocks)",
        )
        require(
            self,
            "head_dim",
            self.head_dim >= 32 and Q_ELEMS % self.head_dim == 0 and self.head_dim <= 1024,
            "a power of two from 32 to 1024 (a core holds 4096 query and 2048 key values)",
        )
        require(
            self,
            "head_dim",
            g * self.head_dim >= CORES_PER_COLUMN * 32,
            f"heads / kv_heads x head_dim >= {CORES_PER_COLUMN * 32}: one column of cores per "
            "128 query rows of a KV head",
        )
        for name in ("chunk", "max_l") + (("window",) if self.window is not None else ()):
            value = getattr(self, name)
            require(self, name, value > 0 and value % ROUND == 0, f"a positive multiple of {ROUND}")
        require(self, "chunk", self.chunk <= self.max_l, f"at most max_l={self.max_l}")
        self.check_call(L_begin=self.L_begin, L_end=self.L_end)
        check_aie2p(self, self.device)

    def check_call(self, *, L_begin: int, L_end: int) -> None:
        """Refuse a call's token range by the rule it breaks, before anything
        runs (a misaligned length would hang the device)."""
        name = type(self).__name__
        for key, value in (("L_begin", L_begin), ("L_end", L_end)):
            if value % ROUND:
                raise OperatorError(
                    f"{name}: {key}={value}: a multiple of {ROUND} (one round of query rows)"
                )
        if not 0 <= L_begin < L_end <= self.max_l:
            raise OperatorError(
                f"{name}: L_end={L_end}: 0 <= L_begin < L_end <= max_l={self.max_l} "
                f"(L_begin={L_begin})"
            )
        if L_end - L_begin > self.chunk:
            raise OperatorError(
                f"{name}: L_end={L_end}: at most chunk={self.chunk} rows past L_begin={L_begin}"
            )

    # ---- numerics ---------------------------------------------------------------------

    def key_source(self, cache, k, v, L_begin: int, L_end: int):
        """(positions, keys, values) a call reads: cache positions, then the chunk's."""
        lo = 0 if self.window is None else max(0, L_begin - self.window + 1)
        old = np.arange(lo, L_begin)
        slots = old if self.window is None else old % self.window
        positions = np.concatenate([old, np.arange(L_begin, L_end)])
        n = L_end - L_begin
        keys = np.concatenate([cache[0, slots], k[:n]])
        values = np.concatenate([cache[1, slots], v[:n]])
        return positions, keys, values

    def reference(self, q, k, v, cache, *, L_begin, L_end):
        self.check_call(L_begin=L_begin, L_end=L_end)
        n = L_end - L_begin
        positions, keys, values = self.key_source(cache, k, v, L_begin, L_end)
        seen = gemma4.visible(np.arange(L_begin, L_end), positions, self.window)
        o = np.zeros(q.shape, np.float32)
        o[:n] = gemma4.attend(q[:n], keys, values, seen)
        o = o.astype(bf16)
        if not self.writes_cache:
            return o
        return self.written(cache, k, v, L_begin, L_end), o

    def written(self, cache, k, v, L_begin: int, L_end: int) -> np.ndarray:
        """The cache after the call stores the chunk's keys and values."""
        out = np.array(cache, copy=True)
        first = L_begin if self.window is None else max(L_begin, L_end - self.window)
        positions = np.arange(first, L_end)
        slots = positions if self.window is None else positions % self.window
        out[0, slots] = k[positions - L_begin]
        out[1, slots] = v[positions - L_begin]
        return out

    def example_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """q and k as Gemma 4's q/k norms leave them (unit rms), scaled by
        head_dim^-1/4 each so the scores are of order 1; v of unit rms; the
        cache filled the same way."""
        s = self.head_dim**-0.25
        q = (rng.standard_normal((self.chunk, self.heads, self.head_dim)) * s).astype(bf16)
        kv = (self.chunk, self.kv_heads, self.head_dim)
        k = (rng.standard_normal(kv) * s).astype(bf16)
        v = rng.standard_normal(kv).astype(bf16)
        cache = rng.standard_normal((2, self.cache_rows, self.kv_heads, self.head_dim))
        cache[0] *= s
        return [q, k, v, cache.astype(bf16)]

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """relative 2^-6 with atol BUDGET * rms|v| over the values the call
        reads (the output is a weighted mean of them; the device rounds the
        weights to bf16 and takes exp as a bf16 estimate), of `inputs` (q, k,
        v, cache) when given, else of unit values."""
        scale = 1.0
        if inputs is not None:
            _, k, v, cache = inputs
            _, _, values = self.key_source(cache, k, v, self.L_begin, self.L_end)
            finite = finite_abs(values)
            scale = float(np.sqrt(np.mean(finite**2))) if finite.size else 0.0
        return Tolerance.relative(2.0**-6, atol=BUDGET * scale)

    # ---- the design ---------------------------------------------------------------------

    def schedule(self, device: Device | None = None) -> Schedule:
        """The design's work split on `device` (default: the operator's)."""
        return Schedule(self, device or self.device)


class Schedule:
    """How a prefill design splits a call: `cores` cores in `columns`
    columns, units of (query head, block of `bq` rows) in waves of `cores`
    units of one KV head, key blocks of `bk` rows."""

    def __init__(self, op, device: Device) -> None:
        self.op, self.device = op, device
        self.bq, self.bk = q_rows(op.head_dim), k_rows(op.head_dim)
        per_round = op.group * ROUND // self.bq  # units of one KV head per 128 rows
        self.columns = max(
            c for c in range(1, device.columns + 1) if per_round % (CORES_PER_COLUMN * c) == 0
        )
        self.cores = CORES_PER_COLUMN * self.columns

    def waves_per_head(self, L_begin: int, L_end: int) -> int:
        return self.op.group * ((L_end - L_begin) // self.bq) // self.cores

    def tail_waves(self, L_begin: int, L_end: int) -> int:
        """Waves of zero blocks for rows L_end - L_begin .. chunk."""
        return self.op.heads * ((self.op.chunk - (L_end - L_begin)) // self.bq) // self.cores

    def wave_rows(self) -> int:
        """Query positions one wave spans."""
        return max(self.cores // self.op.group, 1) * self.bq

    def key_blocks(self, L_begin: int, L_end: int) -> int:
        """Key blocks every wave reads: all positions to L_end (global), or
        a window's worth and a wave's rows, and a block of slack (sliding)."""
        if self.op.window is None:
            return L_end // self.bk
        span = -(-(self.op.window + self.wave_rows() + self.bk) // self.bk) * self.bk
        return min(span, L_end) // self.bk

    def first_key(self, wave: int, L_begin: int, L_end: int) -> int:
        """The first key position of wave `wave` (within its KV head): 0, or
        the first its first query sees, down to a block and clamped so the
        wave's key blocks end by L_end. The kernel computes the same."""
        return first_key(
            wave,
            L_begin,
            L_end,
            self.key_blocks(L_begin, L_end),
            self.cores,
            self.op.group,
            self.bq,
            self.bk,
            self.op.window or 0,
        )

    def params(self, L_begin: int, L_end: int) -> dict[str, int]:
        return {
            "L_begin": L_begin,
            "L_end": L_end,
            "waves": self.op.kv_heads * self.waves_per_head(L_begin, L_end),
            "waves_per_head": self.waves_per_head(L_begin, L_end),
            "key_blocks": self.key_blocks(L_begin, L_end),
            "tail_waves": self.tail_waves(L_begin, L_end),
        }


def first_key(wave, L_begin, L_end, key_blocks, cores, group, bq, bk, window) -> int:
    if window == 0:
        return 0
    first_query = L_begin + (wave * cores // group) * bq
    start = max(0, first_query - window + 1) // bk * bk
    return min(start, L_end - key_blocks * bk)


# ---- the kernels' arithmetic (kernels/gemma4_prefill.cc) -----------------------------------

# state words of a core: [q objects seen this wave, key block, first key position,
# first query position, waves begun this call]
Q_SEEN, BLOCK, FIRST_KEY, FIRST_QUERY, WAVES = range(5)


def reset_model(state):
    """After a call: no wave begun."""
    state[WAVES] = 0


def begin_model(acc, stats, state, head_dim, core, cores, group, window, L_begin, L_end, blocks,
                per_head):  # fmt: skip
    """A wave begins: its unit's first query position, its first key, and
    the running max (-inf), sum (0) and accumulator (0) of every row."""
    bq, bk = q_rows(head_dim), k_rows(head_dim)
    wave = int(state[WAVES]) % per_head
    state[FIRST_QUERY] = L_begin + (wave * cores + core) // group * bq
    state[FIRST_KEY] = first_key(wave, L_begin, L_end, blocks, cores, group, bq, bk, window)
    state[Q_SEEN] = state[BLOCK] = 0
    state[WAVES] += 1
    stats[0] = -np.inf
    stats[1] = 0
    acc[:] = 0


def take_q_model(obj, qbuf, state, core):
    """The wave's query blocks pass by; the core's own (the `core`-th) is kept."""
    if state[Q_SEEN] == core:
        qbuf[:] = np.asarray(obj).reshape(qbuf.shape)
    state[Q_SEEN] += 1


def block_model(qbuf, kv, acc, stats, state, head_dim, window):
    """One key block into the rows' online softmax: s = q . k (lane_dot),
    keys the query does not see at -inf; per row m' = max(m, max s), the
    rescale a = exp(m - m') and the weights p = exp(s - m') as bf16, l = l
    a + sum p (in key order), acc = acc a + sum p v (in key order, each
    product exact, one rounding per add)."""
    bq = acc.shape[0]
    keys, values = kernel_math.f32(kv[0]), kernel_math.f32(kv[1])
    bk = keys.shape[0]
    qpos = int(state[FIRST_QUERY]) + np.arange(bq)
    kpos = int(state[FIRST_KEY]) + int(state[BLOCK]) * bk + np.arange(bk)
    state[BLOCK] += 1
    seen = gemma4.visible(qpos, kpos, window or None)
    scores = kernel_math.lane_dot(kernel_math.f32(qbuf)[:, None, :], keys[None, :, :])
    scores = np.where(seen, scores, np.float32(-np.inf))
    top = np.maximum(stats[0], scores.max(axis=1))
    live = np.isfinite(top)  # a row that has seen no key yet stays as it is
    if not live.any():
        return
    top = np.where(live, top, np.float32(0))
    alpha = kernel_math.exp_bf16(stats[0] - top)  # exp(-inf) = 0: nothing seen before
    weights = kernel_math.exp_bf16(scores - top[:, None])
    total = stats[1] * alpha
    out = acc * alpha[:, None]
    for t in range(bk):
        total = total + weights[:, t]
        out = out + weights[:, t : t + 1] * values[t]
    stats[0] = np.where(live, top, stats[0])
    stats[1] = np.where(live, total, stats[1])
    acc[:] = np.where(live[:, None], out, acc)


def end_model(acc, stats, o, head_dim):
    """o = bf16(acc * (1 / l))."""
    inv = np.float32(1) / kernel_math.f32(stats[1])
    o[:] = (acc * inv[:, None]).astype(bf16)


def zero_model(o):
    o[:] = 0


def kernels(head_dim: int) -> dict[str, Kernel]:
    source = shipped("iron.ops.flm", SOURCE)
    bq, bk = q_rows(head_dim), k_rows(head_dim)
    acc, stats, state = Memref((bq, head_dim), "f32"), Memref((2, bq), "f32"), Memref((8,), "i32")
    qbuf, kv, o = (
        Memref((bq, head_dim), "bf16"),
        Memref((2, bk, head_dim), "bf16"),
        Memref((bq, head_dim), "bf16"),
    )
    i32 = Scalar()
    return {
        "reset": Kernel("gemma4_prefill_reset", (state,), source, reset_model),
        "begin": Kernel(
            "gemma4_prefill_begin", (acc, stats, state, *[i32] * 9), source, begin_model
        ),
        "take_q": Kernel("gemma4_prefill_take_q", (kv, qbuf, state, i32), source, take_q_model),
        "block": Kernel(
            "gemma4_prefill_block", (qbuf, kv, acc, stats, state, i32, i32), source, block_model
        ),
        "end": Kernel("gemma4_prefill_end", (acc, stats, o, i32), source, end_model),
        "zero": Kernel("gemma4_prefill_zero", (o,), source, zero_model),
    }


# ---- the configuration -------------------------------------------------------------------


#: L_begin and L_end carry the per-call members; the rest derive from them
#: (`PrefillBase.runtime_params`)
PARAMS = (
    Param("L_begin", member="L_begin"),
    Param("L_end", member="L_end"),
    "waves",
    "waves_per_head",
    "key_blocks",
    "tail_waves",
)


def configuration(op, schedule: Schedule) -> tuple:
    """(fifos, links, workers) of the one image every call of `op` runs."""
    d, cols, cores = op.head_dim, schedule.columns, schedule.cores
    bq, bk = schedule.bq, schedule.bk
    ks = kernels(d)
    names = [[f"attn_{c}_{r}" for r in range(CORES_PER_COLUMN)] for c in range(cols)]
    everyone = tuple(core(n) for column in names for n in column)
    fifos = [
        ObjectFifo("k", (bk, d), "bf16", shim(), (memtile("kv"),)),
        ObjectFifo("v", (bk, d), "bf16", shim(), (memtile("kv"),)),
        ObjectFifo("kvq", (2, bk, d), "bf16", memtile("kv"), everyone),
    ]
    links = [join("kv", ["k", "v"], "kvq", [0, bk * d], tile=Tile(0, 1))]
    if op.writes_cache:
        fifos += [
            ObjectFifo("copy_in", (K_ELEMS,), "bf16", shim(), (memtile("copy"),)),
            ObjectFifo("copy_out", (K_ELEMS,), "bf16", memtile("copy"), (shim(),)),
        ]
        # a free memtile, else column 1's (its output join leaves two channels)
        spare = cols if cols < op.device.columns else 1
        links.append(forward("copy", "copy_in", "copy_out", tile=Tile(spare, 1)))
    workers = []
    window = op.window or 0
    for c in range(cols):
        outs = [f"o{c}_{r}" for r in range(CORES_PER_COLUMN)]
        fifos += [
            ObjectFifo(o, (bq, d), "bf16", core(names[c][r]), (memtile(f"o{c}"),))
            for r, o in enumerate(outs)
        ]
        fifos.append(
            ObjectFifo(f"o{c}", (CORES_PER_COLUMN * bq, d), "bf16", memtile(f"o{c}"), (shim(),))
        )
        offsets = [r * bq * d for r in range(CORES_PER_COLUMN)]
        links.append(join(f"o{c}", outs, f"o{c}", offsets, tile=Tile(c, 1)))
        for r in range(CORES_PER_COLUMN):
            i, o = c * CORES_PER_COLUMN + r, outs[r]
            begin = Call(
                ks["begin"],
                (Buf("acc"), Buf("stats"), Buf("state"), d, i, cores, op.group, window,
                 Param("L_begin"), Param("L_end"), Param("key_blocks"), Param("waves_per_head")),
            )  # fmt: skip
            take = Call(ks["take_q"], (Obj("kvq"), Buf("q"), Buf("state"), i))
            block = Call(
                ks["block"],
                (Buf("q"), Obj("kvq"), Buf("acc"), Buf("stats"), Buf("state"), d, window),
            )
            # a core's first act of a call is an acquire: between calls it
            # waits at the top of its body
            wave = (
                Acquire("kvq"),
                begin,
                take,
                Release("kvq"),
                Loop(cores - 1, [Acquire("kvq"), take, Release("kvq")]),
                Loop(Param("key_blocks"), [Acquire("kvq"), block, Release("kvq")]),
                Acquire(o),
                Call(ks["end"], (Buf("acc"), Buf("stats"), Obj(o), d)),
                Release(o),
            )
            # the reset ends the body (the image zeroes the state once)
            body = (
                Loop(Param("waves"), wave),
                Loop(Param("tail_waves"), [Acquire(o), Call(ks["zero"], (Obj(o),)), Release(o)]),
                Call(ks["reset"], (Buf("state"),)),
            )
            buffers = (
                LocalBuffer("q", (bq, d), "bf16"),
                LocalBuffer("acc", (bq, d), "f32"),
                LocalBuffer("stats", (2, bq), "f32"),
                LocalBuffer("state", (8,), "i32", initial_value=0),
            )
            workers.append(
                Worker(names[c][r], body, tile=Tile(c, FIRST_CORE_ROW + r), buffers=buffers)
            )
    return tuple(fifos), tuple(links), tuple(workers)


# ---- the runtime sequence ------------------------------------------------------------------


def _unit_tap(offset: int, units: int, group: int, op, rows: int, row0: int) -> TAP:
    """`units` consecutive (block, head) units of q or o, b-major over
    `group` heads: rows row0..row0 + rows of each block, all head_dim."""
    d, stride = op.head_dim, op.heads * op.head_dim
    bq = q_rows(d)
    if units <= group:
        return TAP(offset + row0 * stride, (units, rows, d), (d, stride, 1))
    return TAP(
        offset + row0 * stride, (units // group, group, rows, d), (bq * stride, d, stride, 1)
    )


def _key_runs(op, first: int, end: int, L_begin: int) -> list[tuple[str, int, int]]:
    """(tensor, first row, rows) runs of positions first..end: the cache's
    (ring slots wrap), then the chunk's."""
    runs = []
    stop = min(end, L_begin)
    if first < stop:
        if op.window is None:
            runs.append(("cache", first, stop - first))
        else:
            slot, count = first % op.window, stop - first
            head = min(count, op.window - slot)
            runs.append(("cache", slot, head))
            if count > head:
                runs.append(("cache", 0, count - head))
    if end > L_begin:
        runs.append(("chunk", max(first, L_begin) - L_begin, end - max(first, L_begin)))
    return runs


def sequence(op, schedule: Schedule, L_begin: int, L_end: int) -> list:
    """One call's runtime sequence: per KV head and wave, the wave's query
    halves and key runs onto the k and v streams and its output blocks
    drained; then the zero blocks; then the cache's update."""
    device, d, kvh, cores = schedule.device, op.head_dim, op.kv_heads, schedule.cores
    g_heads, bq, bk = op.group, schedule.bq, schedule.bk
    row = kvh * d  # a position's K (or V) across heads
    cache_half = op.cache_rows * row
    out = []
    per_head = schedule.waves_per_head(L_begin, L_end)
    blocks = schedule.key_blocks(L_begin, L_end)
    for g in range(kvh):
        for w in range(per_head):
            group = f"g{g}w{w}"
            first_unit = w * cores
            base = (
                first_unit // g_heads * bq * op.heads * d + (g * g_heads + first_unit % g_heads) * d
            )
            for fifo, half in (("k", 0), ("v", 1)):
                tap = _unit_tap(base, cores, g_heads, op, bq // 2, half * bq // 2)
                out.append(Fill(fifo, "q", tap, group=group))
            first = schedule.first_key(w, L_begin, L_end)
            for tensor, start, rows in _key_runs(op, first, first + blocks * bk, L_begin):
                for fifo, part in (("k", 0), ("v", 1)):
                    if tensor == "cache":
                        offset, name = part * cache_half + start * row + g * d, "cache"
                    else:
                        offset, name = start * row + g * d, fifo
                    out.append(
                        Fill(fifo, name, rows_tap(offset, rows, row, d, device), group=group)
                    )
            for c in range(schedule.columns):
                unit = first_unit + c * CORES_PER_COLUMN
                offset = unit // g_heads * bq * op.heads * d + (g * g_heads + unit % g_heads) * d
                tap = _unit_tap(offset, CORES_PER_COLUMN, g_heads, op, bq, 0)
                out.append(Drain(f"o{c}", "o", tap, group=group))
            out.append(Finish(group))
    n = L_end - L_begin
    for t in range(schedule.tail_waves(L_begin, L_end)):
        group = f"tail{t}"
        for c in range(schedule.columns):
            unit = t * cores + c * CORES_PER_COLUMN
            offset = (n // bq + unit // op.heads) * bq * op.heads * d + unit % op.heads * d
            tap = _unit_tap(offset, CORES_PER_COLUMN, op.heads, op, bq, 0)
            out.append(Drain(f"o{c}", "o", tap, group=group))
        out.append(Finish(group))
    if op.writes_cache:
        out += _cache_update(op, L_begin, L_end, device)
    return out


def _cache_update(op, L_begin: int, L_end: int, device: Device) -> list:
    """The chunk's keys and values into the cache through a memtile, after
    every wave has read what it needed."""
    row = op.kv_heads * op.head_dim
    first = L_begin if op.window is None else max(L_begin, L_end - op.window)
    runs = [(first, L_end)]
    if op.window is not None and first // op.window != (L_end - 1) // op.window:
        wrap = (first // op.window + 1) * op.window
        runs = [(first, wrap), (wrap, L_end)]
    out = []
    for part, tensor in ((0, "k"), (1, "v")):
        for lo, hi in runs:
            slot = lo if op.window is None else lo % op.window
            count = (hi - lo) * row
            out.append(
                Fill("copy_in", tensor, TAP.linear(count, (lo - L_begin) * row), group="copy")
            )
            target = part * op.cache_rows * row + slot * row
            out.append(Drain("copy_out", "cache", TAP.linear(count, target), group="copy"))
    return [*out, Finish("copy")]


def build(op, L_begin: int | None = None, L_end: int | None = None) -> Design:
    """`op`'s design for the call (L_begin, L_end) (default: its per-call values)."""
    L_begin = op.L_begin if L_begin is None else L_begin
    L_end = op.L_end if L_end is None else L_end
    op.check_call(L_begin=L_begin, L_end=L_end)
    schedule = op.schedule()
    fifos, links, workers = configuration(op, schedule)
    tensors = tuple(
        Tensor(spec.name, spec.shape, "bf16", spec.direction) for spec in op.arg_specs()
    )
    window = "" if op.window is None else f"_w{op.window}"
    return Design(
        f"gemma4_prefill_h{op.heads}_kv{op.kv_heads}_d{op.head_dim}_c{op.chunk}_l{op.max_l}{window}"
        f"{'' if op.writes_cache else '_ro'}",
        op.device,
        tensors,
        fifos,
        workers,
        sequence(op, schedule, L_begin, L_end),
        links=links,
        params=PARAMS,
    )


def run(op, q, k, v, cache, *, L_begin: int, L_end: int) -> Simulation:
    """One call simulated: `run(...)["o"]`, `["cache"]` and `.traffic`."""
    design = build(op, L_begin, L_end)
    params = op.schedule().params(L_begin, L_end)
    return simulate(design, {"q": q, "k": k, "v": v, "cache": cache}, params)
