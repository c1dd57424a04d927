"""PrefillAttention and PrefillSlidingAttention: the references against
transformers' attention in float64 (causal, sliding window, GQA, scaling
1.0) over chunks at several [L_begin, L_end), the ring past the window,
chunks that chain through the cache, the per-call refusals; the designs'
check, simulation within tolerance, one configuration for every range, and
a corrupted transfer caught."""

import attrs
import flm_gemma4_f64 as exact
import numpy as np
import pytest
from flm_gemma4 import NPU1, NPU2, close_to_exact, rms, with_values

from iron.core import OperatorError, bf16, compare
from iron.design import Fill, check, design_of
from iron.design.model import canonical
from iron.ops.flm import prefill
from iron.ops.flm.prefill_attention import PrefillAttention
from iron.ops.flm.prefill_sliding_attention import PrefillSlidingAttention

GLOBAL = {"heads": 4, "kv_heads": 2, "max_l": 512, "head_dim": 128, "chunk": 256}
SLIDING = {"heads": 4, "kv_heads": 2, "max_l": 1024, "head_dim": 64, "window": 128, "chunk": 256}
#: (L_begin, L_end): a first chunk, a short one, one past the window (the ring wraps)
RANGES = [(0, 256), (128, 256), (256, 512)]


def ops():
    return [
        PrefillAttention(**GLOBAL).resolve(NPU2),
        PrefillSlidingAttention(**SLIDING).resolve(NPU2),
    ]


def ids(op):
    return type(op).__name__


def exact_output(op, q, k, v, cache, L_begin, L_end):
    """transformers' attention of the chunk's rows over every position they
    see: the cache's (rows, or ring slots) before L_begin, the chunk's after."""
    n = L_end - L_begin
    first = 0 if op.window is None else max(0, L_begin - op.window + 1)
    old = np.arange(first, L_begin)
    slots = old if op.window is None else old % op.window
    keys = np.concatenate([cache[0, slots], k[:n]])
    values = np.concatenate([cache[1, slots], v[:n]])
    positions = np.concatenate([old, np.arange(L_begin, L_end)])
    out = np.zeros(q.shape)
    out[:n] = exact.attention(q[:n], keys, values, np.arange(L_begin, L_end), positions, op.window)
    return out


@pytest.mark.parametrize("op", ops(), ids=ids)
@pytest.mark.parametrize("L_begin, L_end", RANGES)
def test_reference_is_float64_attention_within_one_rounding(op, L_begin, L_end):
    q, k, v, cache = op.example_inputs(np.random.default_rng(L_begin))
    _, o = op.reference(q, k, v, cache, L_begin=L_begin, L_end=L_end)
    want = exact_output(op, q, k, v, cache, L_begin, L_end)
    assert close_to_exact(o, want, rms(v)) is None
    assert not o[L_end - L_begin :].any()  # rows past the call's are 0


@pytest.mark.parametrize("op", ops(), ids=ids)
@pytest.mark.parametrize("L_begin, L_end", RANGES)
def test_the_cache_keeps_the_chunk_where_later_calls_look(op, L_begin, L_end):
    q, k, v, cache = op.example_inputs(np.random.default_rng(1))
    cache_out, _ = op.reference(q, k, v, cache, L_begin=L_begin, L_end=L_end)
    n = L_end - L_begin
    kept = range(L_begin if op.window is None else max(L_begin, L_end - op.window), L_end)
    slots = [p if op.window is None else p % op.window for p in kept]
    assert np.array_equal(cache_out[0, slots], k[[p - L_begin for p in kept]])
    assert np.array_equal(cache_out[1, slots], v[[p - L_begin for p in kept]])
    others = np.setdiff1d(np.arange(op.cache_rows), slots)
    assert np.array_equal(cache_out[:, others], cache[:, others])
    if op.window is not None and n > op.window:  # only the last window of a long chunk
        assert len(slots) == op.window


@pytest.mark.parametrize("op", ops(), ids=ids)
def test_chunks_chained_through_the_cache_are_one_long_prefill(op):
    """Two chunks through the writer's cache equal float64 attention over
    the whole prompt: the global rows, or the ring past its window."""
    rng = np.random.default_rng(2)
    total = 512
    s = op.head_dim**-0.25
    q = (rng.standard_normal((total, op.heads, op.head_dim)) * s).astype(bf16)
    k = (rng.standard_normal((total, op.kv_heads, op.head_dim)) * s).astype(bf16)
    v = rng.standard_normal((total, op.kv_heads, op.head_dim)).astype(bf16)
    cache = np.zeros((2, op.cache_rows, op.kv_heads, op.head_dim), bf16)
    outs = []
    for begin in (0, op.chunk):
        rows = slice(begin, begin + op.chunk)
        cache, o = op.reference(
            q[rows], k[rows], v[rows], cache, L_begin=begin, L_end=begin + op.chunk
        )
        outs.append(o)
    positions = np.arange(total)
    want = exact.attention(q, k, v, positions, positions, op.window)
    assert close_to_exact(np.concatenate(outs), want, rms(v)) is None


def test_a_reader_leaves_the_cache_alone():
    reader = PrefillAttention(**GLOBAL, writes_cache=False)
    assert [s.direction.value for s in reader.arg_specs()][3] == "in"
    q, k, v, cache = reader.example_inputs(np.random.default_rng(0))
    (o,) = reader.call_reference(q, k, v, cache, L_begin=128, L_end=256)
    writer = PrefillAttention(**GLOBAL)
    assert np.array_equal(o, writer.reference(q, k, v, cache, L_begin=128, L_end=256)[1])


@pytest.mark.parametrize(
    "values, message",
    [
        ({"L_begin": 0, "L_end": 200}, "L_end=200: a multiple of 128"),
        ({"L_begin": 64, "L_end": 256}, "L_begin=64: a multiple of 128"),
        ({"L_begin": 256, "L_end": 256}, r"L_end=256: 0 <= L_begin < L_end <= max_l=512"),
        ({"L_begin": 256, "L_end": 640}, r"L_end=640: 0 <= L_begin < L_end <= max_l=512"),
        ({"L_begin": 0, "L_end": 384}, "L_end=384: at most chunk=256 rows past L_begin=0"),
    ],
)
def test_a_bad_range_is_refused_per_call_before_anything_runs(values, message):
    op = PrefillAttention(**GLOBAL).resolve(NPU2)
    q, k, v, cache = op.example_inputs(np.random.default_rng(0))
    match = f"PrefillAttention: {message}"
    with pytest.raises(OperatorError, match=match):
        op.call_reference(q, k, v, cache, **values)
    with pytest.raises(OperatorError, match=match):
        prefill.build(op, values["L_begin"], values["L_end"])
    with pytest.raises(OperatorError, match=match):
        attrs.evolve(op, **values)  # how a compare step sets a call's values


@pytest.mark.parametrize(
    "cls, params, message",
    [
        (PrefillAttention, {**GLOBAL, "heads": 6}, "heads=6: a positive multiple of 4"),
        (PrefillAttention, {**GLOBAL, "kv_heads": 3}, "kv_heads=3: divides heads=4"),
        (PrefillAttention, {**GLOBAL, "head_dim": 96}, "head_dim=96: a power of two from 32"),
        (PrefillAttention, {**GLOBAL, "chunk": 200}, "chunk=200: a positive multiple of 128"),
        (PrefillAttention, {**GLOBAL, "chunk": 1024}, "chunk=1024: at most max_l=512"),
        (PrefillSlidingAttention, {**SLIDING, "window": 100}, "window=100: a positive multiple of 128"),
        (PrefillAttention, {"heads": 4, "kv_heads": 4, "max_l": 512, "head_dim": 64},
         r"head_dim=64: heads / kv_heads x head_dim >= 128"),
    ],
)  # fmt: skip
def test_build_parameters_are_refused_by_rule(cls, params, message):
    with pytest.raises(OperatorError, match=f"{cls.__name__}: {message}"):
        cls(**params)


@pytest.mark.parametrize("cls", [PrefillAttention, PrefillSlidingAttention])
def test_npu1_is_refused_by_rule(cls):
    with pytest.raises(
        OperatorError, match=f"{cls.__name__}: device=npu1: the Gemma 4 kernels are aie2p-only"
    ):
        cls(**(GLOBAL if cls is PrefillAttention else SLIDING)).resolve(NPU1)


# ---- the designs --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [PrefillAttention, PrefillSlidingAttention])
def test_every_case_fits_npu2(cls):
    for case in cls.cases:
        report = check(design_of(cls(**case.params).resolve(NPU2)))
        assert report.ok, str(report)


@pytest.mark.parametrize("op", ops(), ids=ids)
@pytest.mark.parametrize("L_begin, L_end", RANGES)
def test_design_simulates_to_the_reference(op, L_begin, L_end):
    q, k, v, cache = op.example_inputs(np.random.default_rng(L_end))
    run = prefill.run(op, q, k, v, cache, L_begin=L_begin, L_end=L_end)
    cache_out, o = op.reference(q, k, v, cache, L_begin=L_begin, L_end=L_end)
    tolerance = with_values(op, L_begin=L_begin, L_end=L_end).tolerance(
        NPU2, inputs=(q, k, v, cache)
    )
    verdict = compare(run["o"], o, tolerance)
    assert verdict.passed, verdict.detail
    assert np.array_equal(run["cache"], cache_out)  # the chunk's rows, copied exactly
    moved = run.traffic.tensors
    n = L_end - L_begin
    assert moved["o"].written == o.nbytes  # every row once: the call's, then zeros
    kept = n if op.window is None else min(n, op.window)
    assert moved["cache"].written == 2 * kept * op.kv_heads * op.head_dim * 2
    # each query row once per wave's two halves: q is read exactly once
    assert moved["q"].read == n * op.heads * op.head_dim * 2


def test_a_reader_design_writes_nothing():
    op = PrefillAttention(**GLOBAL, writes_cache=False).resolve(NPU2)
    q, k, v, cache = op.example_inputs(np.random.default_rng(0))
    run = prefill.run(op, q, k, v, cache, L_begin=128, L_end=256)
    assert run.traffic.tensors["cache"].written == 0
    (o,) = op.call_reference(q, k, v, cache, L_begin=128, L_end=256)
    assert compare(run["o"], o, with_values(op, L_begin=128, L_end=256).tolerance(NPU2)).passed


@pytest.mark.parametrize("op", ops(), ids=ids)
def test_one_configuration_serves_every_range(op):
    designs = [prefill.build(op, b, e) for b, e in [*RANGES, (0, 128), (384, 512)]]
    configurations = {canonical((d.name, d.fifos, d.links, d.workers, d.params)) for d in designs}
    assert len(configurations) == 1
    assert len({canonical(d.sequence) for d in designs}) == len(designs)


def test_swapped_query_halves_fail():
    """The first wave's query halves onto the other stream: the cores get
    their blocks' rows in the wrong order, only the output tells."""
    op = PrefillAttention(**GLOBAL).resolve(NPU2)
    q, k, v, cache = op.example_inputs(np.random.default_rng(0))
    design = prefill.build(op, 0, 128)
    sequence = list(design.sequence)
    first, second = [i for i, s in enumerate(sequence) if isinstance(s, Fill) and s.tensor == "q"][
        :2
    ]
    a, b = sequence[first], sequence[second]
    sequence[first] = attrs.evolve(a, tap=b.tap)
    sequence[second] = attrs.evolve(b, tap=a.tap)
    broken = attrs.evolve(design, sequence=sequence)
    from iron.design import simulate

    run = simulate(broken, {"q": q, "k": k, "v": v, "cache": cache}, op.schedule().params(0, 128))
    _, o = op.reference(q, k, v, cache, L_begin=0, L_end=128)
    assert not compare(run["o"], o, op.tolerance(NPU2, inputs=(q, k, v, cache))).passed


@pytest.mark.slow
@pytest.mark.parametrize(
    "cls, params, ranges",
    [
        (PrefillAttention, {"heads": 8, "kv_heads": 1, "max_l": 2048}, [(0, 512), (512, 1024)]),
        (PrefillSlidingAttention, {"heads": 8, "kv_heads": 1, "max_l": 2048}, [(512, 1024)]),
    ],
)
def test_e2b_widths_simulate_to_the_reference(cls, params, ranges):
    """Gemma 4 E2B's attention: 8 query heads over 1 KV head, head dim 512
    (global) or 256 (sliding, window 512), 512-row chunks."""
    op = cls(**params).resolve(NPU2)
    q, k, v, cache = op.example_inputs(np.random.default_rng(0))
    for L_begin, L_end in ranges:
        run = prefill.run(op, q, k, v, cache, L_begin=L_begin, L_end=L_end)
        cache_out, o = op.reference(q, k, v, cache, L_begin=L_begin, L_end=L_end)
        tolerance = with_values(op, L_begin=L_begin, L_end=L_end).tolerance(
            NPU2, inputs=(q, k, v, cache)
        )
        verdict = compare(run["o"], o, tolerance)
        assert verdict.passed, verdict.detail
        assert np.array_equal(run["cache"], cache_out)
