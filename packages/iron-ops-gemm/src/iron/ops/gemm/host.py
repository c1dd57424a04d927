"""Host kernels: the `cpu` backend's fused bf16 versions of the operators
that carry the weight bytes (GEMV, GEMM, GQAScores, GQAContext), and the
prefill's attention (MHA).

An operator names its kernel as a string, ``host = "iron.ops.gemm.host:gemv"``;
the backend imports this module only when it runs one, so the family stays
importable without a JIT. A kernel is ``kernel(op, *arrays, **per_call)``
with the step's arrays in the operator's spec order; it writes its outputs
in place.

Numerics are the references': bf16 in, float32 inside, one rounding to bf16
(to nearest even) per output. A weight is read as bf16, two bytes per
element, and widened in registers (a bf16's bits are a float32's top half),
so a decode step streams each weight once at two bytes per weight instead of
upcasting it to a float32 copy first. GEMV also has a kernel for
consecutive steps (`gemv_steps`, the operator's ``host_steps``): GEMVs
reading one x, a layer's q, k and v or an MLP's gate and up, share one
parallel launch.

Every numba kernel splits its work over outputs only (rows of a GEMV, KV
groups of attention): one output is reduced by one thread, in an order
fixed by the compiled loop, so results are the same bits for any thread
count and on every run. GEMM's products are BLAS's, run on one
BLAS thread per panel (see `gemm`), its panels shared out on the worker
threads of the session that runs it (the cpu backend passes its `pool`;
nothing of it lives in this module). Compiled code is cached on disk (numba's
``cache=True``) in the user cache, ``IRON_KERNEL_CACHE/iron.ops.gemm.host``
(iron-ops-eltwise's `use_user_cache`; ``NUMBA_CACHE_DIR`` wins), so every
venv of the same code loads what one compiled; weights reach the kernels
read-only (`readonly`), as a checkpoint's mapping hands them out, so one
specialisation serves both. `warm_up` compiles (or loads) every kernel
and says how long that took. ``NUMBA_NUM_THREADS`` sets the threads (default: every
core).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from concurrent.futures import wait

import numba
import numpy as np
from numba import njit, prange

from iron.core import bf16

# the bf16 bit tricks are shared with the eltwise family's host kernels
from iron.ops.eltwise.host import bits16 as _bits16
from iron.ops.eltwise.host import readonly, warm
from iron.ops.eltwise.host import to_bf16 as _round
from iron.ops.eltwise.host import widen as _widen

#: reassociation lets the reduction vectorize; the order is still fixed by
#: the compiled loop, never by the thread count. No contraction into FMAs,
#: and no assumptions about NaN or infinity, so results match plain float32
#: arithmetic up to summation order.
_FAST = {"reassoc", "nsz", "arcp"}
#: weight columns a GEMM widens to float32 at once before its product, per
#: thread, within a bound on their bytes: a buffer (no float32 copy of the
#: weight) that stays in cache between its widening and sgemm's read, and
#: panels enough for the threads to share even a 512-column projection.
#: Narrower panels cost more at large K: each sgemm call packs all of A
#: again (at K = 8192, 64-column panels ran ~10% slower than 256). Fixed,
#: not per thread count: sgemm's float32 sums depend on the panel's shape.
GEMM_PANEL_COLUMNS, GEMM_PANEL_BYTES = 256, 8 << 20


@njit(cache=True)
def _widen_vector(x):
    out = np.empty(x.shape[0], np.float32)
    for k in range(x.shape[0]):
        out[k] = _widen(x[k])
    return out


# ---- GEMV ---------------------------------------------------------------------


#: matrices one launch reads (GEMVs sharing x: a layer's q, k and v)
GEMV_GROUP = 3


@njit(parallel=True, fastmath=_FAST, cache=True)
def _gemv_group(a0, a1, a2, x, y0, y1, y2):
    """y_j[i] = a_j[i, :] . x for three bf16-bit matrices sharing x (an
    unused one has no rows), in one launch: their rows are one range split
    over the threads. A row is reduced by one thread in the compiled loop's
    order, so the bits do not depend on the thread count."""
    depth = x.shape[0]
    xf = _widen_vector(x)
    first, second = a0.shape[0], a0.shape[0] + a1.shape[0]
    for n in prange(second + a2.shape[0]):
        i = np.int64(n)  # prange's index may be unsigned: i - first must stay an integer
        if i < first:
            a, y, r = a0, y0, i
        elif i < second:
            a, y, r = a1, y1, i - first
        else:
            a, y, r = a2, y2, i - second
        row = a[r]
        acc = np.float32(0)
        for k in range(depth):
            acc += _widen(row[k]) * xf[k]
        y[r] = _round(acc)


@njit(parallel=True, fastmath=_FAST, cache=True)
def _gemv_group_narrow(a0, a1, a2, x, y0, y1, y2):
    """`_gemv_group` with x widened where it is read instead of once: for
    long rows, whose float32 x would fill L1 beside the streaming rows."""
    depth = x.shape[0]
    first, second = a0.shape[0], a0.shape[0] + a1.shape[0]
    for n in prange(second + a2.shape[0]):
        i = np.int64(n)
        if i < first:
            a, y, r = a0, y0, i
        elif i < second:
            a, y, r = a1, y1, i - first
        else:
            a, y, r = a2, y2, i - second
        row = a[r]
        acc = np.float32(0)
        for k in range(depth):
            acc += _widen(row[k]) * _widen(x[k])
        y[r] = _round(acc)


#: longest x (elements) widened once per launch; a longer one is widened
#: where it is read: at 8192 (an MLP's down projection) the float32 x (32
#: KiB, all of L1) and the streaming rows evict each other, and the bf16 x
#: streamed 2048 rows of 8192 17-20% faster (15.6 against 18.1 GB/s on two
#: threads, medians of 9 alternating passes); at 2048 widening once is as
#: fast or faster
WIDE_X_MAX = 4096


def _gemv_launch(pairs, x) -> None:
    """Up to GEMV_GROUP (a, y) bit pairs sharing x, as one launch (the
    matrices read-only, as weights always reach a kernel)."""
    depth = x.shape[0]
    empty = (np.empty((0, depth), np.uint16), np.empty(0, np.uint16))
    (a0, y0), (a1, y1), (a2, y2) = [*pairs, *[empty] * (GEMV_GROUP - len(pairs))]
    kernel = _gemv_group if depth <= WIDE_X_MAX else _gemv_group_narrow
    kernel(readonly(a0), readonly(a1), readonly(a2), x, y0, y1, y2)


def gemv(op, A, x, y):
    a = _bits16(A).reshape(-1, op.M, op.K)
    xs, ys = _bits16(x).reshape(-1, op.K), _bits16(y).reshape(-1, op.M)
    for b in range(a.shape[0]):
        _gemv_launch([(a[b], ys[b])], xs[b])


def gemv_steps(ops, arrays) -> None:
    """Consecutive GEMV steps at once (the cpu backend's `host_steps`):
    those reading the same x, unbatched, share launches of up to
    GEMV_GROUP matrices; any other runs alone."""
    shared: dict[tuple, list] = {}
    for op, (A, x, y) in zip(ops, arrays):
        if op.num_batches != 1:
            gemv(op, A, x, y)
            continue
        key = (x.__array_interface__["data"][0], x.shape)
        shared.setdefault(key, [x, []])[1].append((_bits16(A), _bits16(y)))
    for x, pairs in shared.values():
        for at in range(0, len(pairs), GEMV_GROUP):
            _gemv_launch(pairs[at : at + GEMV_GROUP], _bits16(x))


# ---- GEMM ---------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _widen_rows(src, dst):
    """dst = src widened (bf16 bits -> float32)."""
    for i in range(src.shape[0]):
        for k in range(src.shape[1]):
            dst[i, k] = _widen(src[i, k])


@njit(nogil=True, cache=True)
def _round_into(block, out, start, column_major):
    """C's columns start.. = block (their transpose, (width, M)) rounded to
    bf16 bits; out is C's bits, (M, N), or (N, M) when `column_major`."""
    width, rows = block.shape
    if column_major:
        for j in range(width):
            for i in range(rows):
                out[start + j, i] = _round(block[j, i])
    else:
        for i in range(rows):
            for j in range(width):
                out[i, start + j] = _round(block[j, i])


def gemm(op, A, B, C, *, pool=None):
    """bf16 GEMMs: the weight's columns in fixed panels, each widened to
    float32, multiplied by single-threaded BLAS sgemm and kept or rounded
    once, the panels shared out among the threads of `pool` (the session's
    `iron.dispatch.host.HostPool`; None: this thread alone). The bits depend
    only on the shapes: not on the thread count, nor on the run. int8 GEMMs
    run the reference."""
    if op.dtype_in != bf16:
        C[...] = op.reference(A, B)
        return
    a = np.empty(A.shape, np.float32)
    _widen_rows(_bits16(A), a)
    a_t = a.T
    columns = _bits16(B) if op.b_col_maj else _bits16(B).T  # (N, K) either way
    step = min(op.N, GEMM_PANEL_COLUMNS, max(1, GEMM_PANEL_BYTES // (4 * op.K)))
    panels = iter(range(0, op.N, step))  # shared: a worker takes the next one when free

    def work():
        panel = _panel_buffer(pool, step * op.K)
        for start in panels:
            width = min(step, op.N - start)
            widened = panel[: width * op.K].reshape(width, op.K)
            # contiguous arrays only: one compiled specialisation per kernel
            _widen_rows(readonly(np.ascontiguousarray(columns[start : start + width])), widened)
            # C's columns as rows: sgemm runs a wide panel times few rows 2.5 to 4x
            # faster than few rows times a panel (measured at 128 x 2048 x 2048)
            block = np.matmul(widened, a_t)
            if op.dtype_out == bf16:
                _round_into(block, _bits16(C), start, op.c_col_maj)
            elif op.c_col_maj:
                C[start : start + width] = block
            else:
                C[:, start : start + width] = block.T

    _share_out(work, pool)


# ---- GEMM's threads ---------------------------------------------------------------

#: OpenBLAS's thread count is one per process, whoever changes it: GEMMs of
#: every session take turns holding it at one thread (a lock per session
#: would let one session restore it while another's panels run)
_blas_lock = threading.Lock()


def _panel_buffer(pool, size: int) -> np.ndarray:
    """This thread's float32 panel, kept between calls in the pool's
    per-thread storage (a fresh array per panel would fault, and zero, its
    pages on every use); a fresh one without a pool."""
    local = pool.local if pool is not None else None
    buffer = getattr(local, "panel", None)
    if buffer is None or buffer.size < size:
        buffer = np.empty(size, np.float32)
        if local is not None:
            local.panel = buffer
    return buffer


def _share_out(work, pool) -> None:
    """Run `work` on numba's thread count of threads of `pool` at once, BLAS
    held to one thread meanwhile (process-wide, so GEMMs take turns): each sgemm
    then sums in single-threaded OpenBLAS's order whichever thread runs it,
    and no BLAS worker spins for a core the other panels need (OpenBLAS's
    threads busy-wait on each other inside a call, and stall when a shared
    host takes one of their cores). Where the BLAS's thread count cannot be
    set, `work` runs once, on the BLAS's own threads (the bits may then
    depend on their count)."""
    blas = _blas_threads()
    if blas is None:
        work()
        return
    get_blas_threads, set_blas_threads = blas
    threads = numba.get_num_threads()
    with _blas_lock:
        previous = get_blas_threads()
        set_blas_threads(1)
        try:
            if threads == 1 or pool is None:
                work()
                return
            running = [pool.submit(work) for _ in range(min(threads, pool.workers))]
            wait(running)  # all of them, even when one fails: BLAS's count is restored after
            for worker in running:
                worker.result()
        finally:
            set_blas_threads(previous)


_BLAS_THREAD_SYMBOLS = (  # (get, set): numpy's wheels, then a plain OpenBLAS
    ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
    ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
    ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
    ("openblas_get_num_threads", "openblas_set_num_threads"),
)


@functools.cache
def _blas_threads():
    """(get, set) of the thread count of the OpenBLAS numpy loaded, else
    None: found among the process's mapped libraries (Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(p for p in paths if p.startswith("/")):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for get, set_ in _BLAS_THREAD_SYMBOLS:
            if hasattr(library, get) and hasattr(library, set_):
                getter, setter = getattr(library, get), getattr(library, set_)
                getter.restype, setter.argtypes = ctypes.c_int, [ctypes.c_int]
                return getter, setter
    return None


# ---- decode attention -----------------------------------------------------------


@njit(parallel=True, fastmath=_FAST, cache=True)
def _gqa_scores(q, keys, scores, valid, scale):
    """scores[h, p] = q[h] . keys[p, h // group] * scale for p < valid, 0
    after; one task per KV group (its cache rows read once)."""
    heads, depth = q.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    for g in prange(kv_heads):
        qf = np.empty((group, depth), np.float32)
        for j in range(group):
            for d in range(depth):
                qf[j, d] = _widen(q[g * group + j, d])
        for p in range(valid):
            key = keys[p, g]
            for j in range(group):
                acc = np.float32(0)
                for d in range(depth):
                    acc += qf[j, d] * _widen(key[d])
                scores[g * group + j, p] = _round(acc * scale)
        for j in range(group):
            for p in range(valid, scores.shape[1]):
                scores[g * group + j, p] = 0


#: KV-cache bytes (a cache's valid rows) up to which decode attention runs
#: on the calling thread alone: waking a second thread and waiting for it
#: at the join costs more than it saves on a short cache
ATTENTION_ALONE_BYTES = 1 << 20


def _threads_for(op, n) -> int:
    """The threads a decode attention step over n cache rows runs on."""
    alone = n * op.kv_heads * op.head_dim * 2 <= ATTENTION_ALONE_BYTES
    return 1 if alone else numba.get_num_threads()


def _on_threads(threads, kernel, *args) -> None:
    """kernel(*args) on `threads` threads (numba's count is per calling
    thread); the result is the same bits on any count."""
    before = numba.get_num_threads()
    if threads == before:
        kernel(*args)
        return
    numba.set_num_threads(threads)
    try:
        kernel(*args)
    finally:
        numba.set_num_threads(before)


def gqa_scores(op, q, keys, scores, *, valid):
    n = op.positions(valid)
    args = (_bits16(q), _bits16(keys), _bits16(scores), n, op.scale)
    _on_threads(_threads_for(op, n), _gqa_scores, *args)


@njit(parallel=True, fastmath=_FAST, cache=True)
def _gqa_context(weights, values, context, valid):
    """context[h] = sum over p < valid of weights[h, p] values[p, h // group];
    one task per KV group."""
    heads, depth = context.shape
    kv_heads = values.shape[1]
    group = heads // kv_heads
    for g in prange(kv_heads):
        acc = np.zeros((group, depth), np.float32)
        for p in range(valid):
            value = values[p, g]
            for j in range(group):
                w = _widen(weights[g * group + j, p])
                for d in range(depth):
                    acc[j, d] += w * _widen(value[d])
        for j in range(group):
            for d in range(depth):
                context[g * group + j, d] = _round(acc[j, d])


def gqa_context(op, weights, values, context, *, valid):
    n = op.positions(valid)
    args = (_bits16(weights), _bits16(values), _bits16(context), n)
    _on_threads(_threads_for(op, n), _gqa_context, *args)


@njit(parallel=True, fastmath=_FAST, cache=True)
def _mha(q, k, v, o, n, scale, causal):
    """Causal (or full) attention of the first n rows, sequence-first
    (rows, heads, d) bf16 bits; rows n.. of o are 0. One task per KV group,
    its keys (transposed) and values widened once for its query heads;
    softmax with max subtraction, its sum applied once per output."""
    rows, heads, depth = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    for g in prange(kv_heads):
        keys_t = np.empty((depth, n), np.float32)  # a query's scores: a row of axpys
        values = np.empty((n, depth), np.float32)
        for j in range(n):
            for d in range(depth):
                keys_t[d, j] = _widen(k[j, g, d])
                values[j, d] = _widen(v[j, g, d])
        scores = np.empty(n, np.float32)
        acc = np.empty(depth, np.float32)
        for h in range(g * group, (g + 1) * group):
            for i in range(n):
                seen = i + 1 if causal else n
                scores[:seen] = 0
                for d in range(depth):
                    query = _widen(q[i, h, d])
                    for j in range(seen):
                        scores[j] += query * keys_t[d, j]
                top = -np.inf
                for j in range(seen):
                    scores[j] *= scale
                    top = max(top, scores[j])
                total = np.float32(0)
                for j in range(seen):
                    scores[j] = np.exp(scores[j] - top)
                    total += scores[j]
                acc[:] = 0
                for j in range(seen):
                    for d in range(depth):
                        acc[d] += scores[j] * values[j, d]
                for d in range(depth):
                    o[i, h, d] = _round(acc[d] / total)
            for i in range(n, rows):
                for d in range(depth):
                    o[i, h, d] = 0


def mha(op, Q, K, V, O):  # noqa: E741 (the spec names)
    def sequence_first(x):  # contiguous either way: one compiled specialisation
        bits = _bits16(x)
        return bits if op.heads_interleaved else np.ascontiguousarray(bits.transpose(1, 0, 2))

    out = _bits16(O) if op.heads_interleaved else np.empty(sequence_first(O).shape, np.uint16)
    scale = np.float32(1 / np.sqrt(op.head_dim))
    _mha(sequence_first(Q), sequence_first(K), sequence_first(V), out, op.seq_len, scale,
         op.causal)  # fmt: skip
    if not op.heads_interleaved:
        _bits16(O)[...] = out.transpose(1, 0, 2)


# ---- housekeeping -----------------------------------------------------------------


def warm_up(status=None) -> dict:
    """Compile (or load from the on-disk cache) every kernel on tiny inputs,
    weights read-only as the kernels get them (see
    `iron.ops.eltwise.host.warm`); also says the thread count."""
    a = readonly(np.zeros((2, 32), np.uint16))
    no_rows = readonly(np.empty((0, 32), np.uint16))
    cache = np.zeros((2, 1, 32), np.uint16)
    rows = np.zeros((2, 2, 32), np.uint16)
    report = warm(
        [
            (_gemv_group, (a, no_rows, no_rows, np.zeros(32, np.uint16), np.zeros(2, np.uint16),
                           np.empty(0, np.uint16), np.empty(0, np.uint16))),
            (_gemv_group_narrow, (a, no_rows, no_rows, np.zeros(32, np.uint16),
                                  np.zeros(2, np.uint16), np.empty(0, np.uint16),
                                  np.empty(0, np.uint16))),
            (_widen_rows, (a, np.zeros((2, 32), np.float32))),
            (_widen_rows, (np.zeros((2, 32), np.uint16), np.zeros((2, 32), np.float32))),
            (_round_into, (np.zeros((2, 2), np.float32), np.zeros((2, 2), np.uint16), 0, False)),
            (_gqa_scores, (np.zeros((2, 32), np.uint16), cache, np.zeros((2, 2), np.uint16), 1,
                           np.float32(1))),
            (_gqa_context, (np.zeros((2, 2), np.uint16), cache, np.zeros((2, 32), np.uint16), 1)),
            (_mha, (rows, rows[:, :1].copy(), rows[:, :1].copy(), np.zeros((2, 2, 32), np.uint16),
                    1, np.float32(1), True)),
        ],
        status,
    )  # fmt: skip
    return {**report, "threads": numba.get_num_threads()}
