"""Host kernels (the cpu backend's): each against its operator's reference
within the operator's own tolerance (the precise budget: the host multiplies
bf16 into float32 like aie2), and the same bits for every thread count and
on every run."""

import functools
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numba
import numpy as np
import pytest

from iron.core import Device, bf16, compare
from iron.ops.gemm import GEMM, GEMV, MHA, GQAContext, GQAScores, host
from iron.ops.gemm.host import warm_up

PRECISE_DEVICE = Device.from_name("npu1")
THREADS = sorted({1, 2, 3, numba.config.NUMBA_NUM_THREADS})


class Pool:
    """What the cpu backend passes a kernel that takes `pool`: its session's
    worker threads (iron.dispatch.host.HostPool), with per-thread storage."""

    def __init__(self, workers):
        self.workers, self.local = workers, threading.local()
        self._executor = ThreadPoolExecutor(workers)

    def submit(self, fn, *args):
        return self._executor.submit(fn, *args)


def normal(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(bf16)


def run(kernel, op, inputs, per_call=None):
    """The kernel's outputs, from output buffers filled with NaN first (bytes
    it never wrote cannot pass for results)."""
    outputs = [
        np.full(s.shape, np.nan if s.dtype.kind != "i" else -1, s.dtype)
        for s in op.arg_specs()
        if not s.reads
    ]
    kernel(op, *inputs, *outputs, **(per_call or {}))
    return outputs


def bits_for_every_thread_count(kernel, op, inputs, per_call=None):
    """The outputs' bytes at each thread count, twice each."""
    seen = set()
    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            for _ in range(2):
                seen.add(b"".join(o.tobytes() for o in run(kernel, op, inputs, per_call)))
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return seen


def test_rounding_is_ml_dtypes_round_to_nearest_even_specials_included():
    ties = np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x00008000], np.uint32)
    values = np.concatenate(
        [
            ties.view(np.float32),
            np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3.14159], np.float32),
            np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 1e3,
        ]
    )
    got = np.array([host._round(v) for v in values], np.uint16)
    want = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("batches", [1, 3])
@pytest.mark.parametrize("x_widened", ["once", "as-read"])
def test_gemv_matches_its_reference_and_is_deterministic(batches, x_widened, monkeypatch):
    """Both kernels: x widened once (short rows) and where it is read (rows
    longer than WIDE_X_MAX; lowered here so a small case takes that path)."""
    if x_widened == "as-read":
        monkeypatch.setattr(host, "WIDE_X_MAX", 64)
    rng = np.random.default_rng(1)
    op = GEMV(M=200, K=96, num_batches=batches)
    lead = (batches,) if batches > 1 else ()
    inputs = [normal(rng, (*lead, 200, 96), 0.05), normal(rng, (*lead, 96))]
    (y,) = run(host.gemv, op, inputs)
    verdict = compare(y, op.reference(*inputs), op.tolerance(PRECISE_DEVICE, inputs=inputs))
    assert verdict.passed, verdict.detail
    assert len(bits_for_every_thread_count(host.gemv, op, inputs)) == 1


def test_gemv_steps_share_launches_and_give_each_gemv_its_own_bits():
    """Four GEMVs on one x (two launches: three, then one), one on another
    x and a batched one: each output the bits `gemv` gives it alone, for
    every thread count."""
    rng = np.random.default_rng(2)
    x, other = normal(rng, 96), normal(rng, 64)
    ops = [GEMV(M=m, K=96) for m in (200, 40, 40, 7)] + [GEMV(M=33, K=64)]
    ops.append(GEMV(M=16, K=96, num_batches=2))
    inputs = [[normal(rng, (op.M, op.K), 0.05), x] for op in ops[:4]]
    inputs += [[normal(rng, (33, 64), 0.05), other]]
    inputs += [[normal(rng, (2, 16, 96), 0.05), normal(rng, (2, 96))]]
    alone = [run(host.gemv, op, i)[0].tobytes() for op, i in zip(ops, inputs)]

    def together():
        outputs = [np.full(op.arg_specs()[2].shape, np.nan, bf16) for op in ops]
        host.gemv_steps(ops, [(*i, y) for i, y in zip(inputs, outputs)])
        return [y.tobytes() for y in outputs]

    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            assert together() == alone
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pytest.mark.parametrize(
    "params",
    [
        {"b_col_maj": True},
        {},
        {"c_col_maj": True},
        {"b_col_maj": True, "dtype_out": "float32"},
        {"dtype_in": "int8", "dtype_out": "int32"},
    ],
    ids=["shipped-weight", "row-major", "c-col-major", "float32-out", "int8-reference"],
)
def test_gemm_matches_its_reference_and_is_deterministic(params, monkeypatch):
    # panels of 40 columns: several panels and a ragged last one at N = 128
    monkeypatch.setattr(host, "GEMM_PANEL_BYTES", 40 * 4 * 64)
    rng = np.random.default_rng(2)
    op = GEMM(M=64, K=64, N=128, tile_m=16, **params)
    specs = op.arg_specs()
    if op.integer:
        inputs = [rng.integers(-128, 128, s.shape).astype(np.int8) for s in specs[:2]]
    else:
        inputs = [normal(rng, specs[0].shape), normal(rng, specs[1].shape, 0.1)]
    (c,) = run(host.gemm, op, inputs)  # no pool: this thread alone
    verdict = compare(c, op.reference(*inputs), op.tolerance(PRECISE_DEVICE, inputs=inputs))
    assert verdict.passed, verdict.detail
    shared = functools.partial(host.gemm, pool=Pool(max(THREADS)))
    assert bits_for_every_thread_count(shared, op, inputs) == {c.tobytes()}


@pytest.mark.slow  # two fresh processes, each importing numba
def test_gemm_bits_do_not_depend_on_how_many_blas_threads_share_it():
    """The panel products are BLAS's: one process per BLAS thread count,
    which the kernel overrides (OpenBLAS on one thread and on several sum
    in different orders)."""
    script = (
        "import numpy as np, hashlib\n"
        "from iron.core import bf16\n"
        "from iron.ops.gemm import GEMM, host\n"
        "rng = np.random.default_rng(3)\n"
        "op = GEMM(M=256, K=512, N=512, b_col_maj=True)\n"
        "a = rng.standard_normal((256, 512)).astype(bf16)\n"
        "b = rng.standard_normal((512, 512)).astype(bf16)\n"
        "c = np.empty((256, 512), bf16)\n"
        "host.gemm(op, a, b, c)\n"
        "print(hashlib.sha256(c.tobytes()).hexdigest())\n"
    )
    digests = set()
    for threads in ("1", "2", "3"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        digests.add(done.stdout.strip())
    assert len(digests) == 1


#: decode attention on the calling thread alone (a short cache) or on every thread
ATTENTION_PATHS = pytest.mark.parametrize(
    "alone_bytes", [host.ATTENTION_ALONE_BYTES, 0], ids=["alone", "every-thread"]
)


@ATTENTION_PATHS
def test_gqa_scores_match_and_never_read_past_valid(alone_bytes, monkeypatch):
    monkeypatch.setattr(host, "ATTENTION_ALONE_BYTES", alone_bytes)
    rng = np.random.default_rng(4)
    op = GQAScores(8, 2, 32, 64)
    q, keys = normal(rng, (8, 32)), normal(rng, (64, 2, 32))
    keys[11:] = np.nan  # stale rows past the valid prefix
    (scores,) = run(host.gqa_scores, op, [q, keys], {"valid": 11})
    want = op.reference(q, keys, valid=11)
    tolerance = GQAScores(8, 2, 32, 64, valid=11).tolerance(PRECISE_DEVICE, inputs=(q, keys))
    assert compare(scores, want, tolerance).passed
    assert not scores[:, 11:].astype(np.float32).any()
    assert len(bits_for_every_thread_count(host.gqa_scores, op, [q, keys], {"valid": 11})) == 1


@ATTENTION_PATHS
def test_gqa_context_matches_and_never_reads_past_valid(alone_bytes, monkeypatch):
    monkeypatch.setattr(host, "ATTENTION_ALONE_BYTES", alone_bytes)
    rng = np.random.default_rng(5)
    op = GQAContext(8, 2, 32, 64)
    weights, values = normal(rng, (8, 64), 0.1), normal(rng, (64, 2, 32))
    weights[:, 9:], values[9:] = 1, np.nan  # nonzero weights over garbage rows
    (context,) = run(host.gqa_context, op, [weights, values], {"valid": 9})
    want = op.reference(weights, values, valid=9)
    tolerance = GQAContext(8, 2, 32, 64, valid=9).tolerance(
        PRECISE_DEVICE, inputs=(weights, values)
    )
    assert compare(context, want, tolerance).passed
    assert np.isfinite(context.astype(np.float32)).all()
    per_call = {"valid": 9}
    assert len(bits_for_every_thread_count(host.gqa_context, op, [weights, values], per_call)) == 1


def test_decode_attention_runs_alone_on_a_short_cache_with_the_same_bits(monkeypatch):
    rng = np.random.default_rng(7)
    scores_op, context_op = GQAScores(8, 2, 32, 64), GQAContext(8, 2, 32, 64)
    q, cache, weights = normal(rng, (8, 32)), normal(rng, (64, 2, 32)), normal(rng, (8, 64), 0.1)
    row_bytes = 2 * 32 * 2  # kv_heads x head_dim bf16
    monkeypatch.setattr(host, "ATTENTION_ALONE_BYTES", 20 * row_bytes)
    assert host._threads_for(scores_op, 20) == 1
    assert host._threads_for(scores_op, 21) == numba.get_num_threads()
    seen = set()
    for valid in (20, 21):  # alone, then on every thread, over the same 20 rows
        cut = cache.copy()
        cut[20:] = 0
        (scores,) = run(host.gqa_scores, scores_op, [q, cut], {"valid": valid})
        (context,) = run(host.gqa_context, context_op, [weights, cut], {"valid": valid})
        seen.add((scores[:, :20].tobytes(), context.tobytes()))
    assert len(seen) == 1


@pytest.mark.parametrize(
    "params",
    [
        {"heads_interleaved": True},
        {"heads_interleaved": False},
        {"heads_interleaved": True, "causal": False},
    ],
    ids=["sequence-first", "heads-first", "not-causal"],
)
def test_mha_matches_its_reference_and_is_deterministic(params):
    rng = np.random.default_rng(6)
    op = MHA(num_heads=4, seq_len=50, num_kv_heads=2, **params)  # 50 of 64 padded rows
    specs = op.arg_specs()
    inputs = [normal(rng, s.shape) for s in specs[:3]]
    for array in inputs[1:]:  # K and V rows past seq_len are never read
        rows = array[50:] if op.heads_interleaved else array[:, 50:]
        rows[...] = np.nan
    (o,) = run(host.mha, op, inputs)
    verdict = compare(o, op.reference(*inputs), op.tolerance(PRECISE_DEVICE, inputs=inputs))
    assert verdict.passed, verdict.detail
    padding = o[50:] if op.heads_interleaved else o[:, 50:]
    assert not padding.astype(np.float32).any()
    assert len(bits_for_every_thread_count(host.mha, op, inputs)) == 1


def test_operators_name_their_host_kernels_and_warm_up_reports_the_jit():
    for op_class in (GEMV, GEMM, GQAScores, GQAContext, MHA):
        module, _, name = op_class.host.partition(":")
        assert module == "iron.ops.gemm.host" and callable(getattr(host, name))
    assert GEMV.host_steps == "iron.ops.gemm.host:gemv_steps"
    report = warm_up()
    assert report["threads"] == numba.get_num_threads() and report["seconds"] >= 0
    assert report["cache_dir"]


DOCTOR = """
import contextlib, io, sys
from iron.core.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    main(["doctor"])
print(next(line for line in out.getvalue().splitlines() if "host kernels (gemm)" in line))
print("numba imported" if "numba" in sys.modules else "numba not imported")
"""


def test_doctor_counts_the_cached_kernels_without_importing_numba(tmp_path):
    def doctor(kernels):
        env = {**os.environ, "IRON_KERNEL_CACHE": str(kernels)}
        found = subprocess.run([sys.executable, "-c", DOCTOR], capture_output=True, text=True,
                               env=env, check=True)  # fmt: skip
        return found.stdout.splitlines()

    line, imported = doctor(tmp_path / "kernels")
    assert imported == "numba not imported"
    where = tmp_path / "kernels" / "iron.ops.gemm.host"
    assert line.endswith(f"numba {numba.__version__}; 0 kernel(s) compiled in {where} "
                         "(the rest compile on first use)")  # fmt: skip
    cache = Path(warm_up()["cache_dir"])  # the 7 kernels it calls, in this run's cache
    line, _ = doctor(cache.parent)
    assert int(line.split("; ")[1].split()[0]) >= 7 and f"compiled in {cache} " in line
