"""Runtime-shaped operators in graphs: one device configuration for every
value of their dispatch-time values, a stream generated (and cached) per
distinct value. Gemma 4's operators (iron-ops-flm) run in graphs on `sim`
with their values bound per call, each output judged by the operator's
tolerance against its reference at the same values."""

import attrs
import numpy as np
import pytest

from iron.core import Device, OperatorError, bf16, compare
from iron.core.cli import main
from iron.dispatch import Session, graph
from iron.dispatch.cache import CompileCache
from iron.dispatch.program import Program
from iron.ops.eltwise.chunk_copy import ChunkCopy
from iron.ops.eltwise.mem_copy import MemCopy
from iron.ops.eltwise.strided_copy import StridedCopy
from iron.ops.flm.decode_layer import DecodeLayer
from iron.ops.flm.gemm import FLMGemm
from iron.ops.flm.lm_head import LMHead
from iron.ops.flm.prefill_attention import PrefillAttention
from iron.ops.flm.prefill_sliding_attention import PrefillSlidingAttention
from iron.ops.flm.sweep import M_VALUES, PROJECTIONS

NPU2 = Device.from_name("npu2")
GLOBAL = {"heads": 4, "kv_heads": 2, "max_l": 512, "head_dim": 128, "chunk": 256}
SMALL_LAYER = {"hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "global_head_dim": 128,
               "intermediate": 512, "double_wide_mlp": True, "per_layer": 256, "window": 128,
               "max_l": 512}  # fmt: skip
SLIDING = {"heads": 4, "kv_heads": 2, "max_l": 1024, "head_dim": 64, "window": 128, "chunk": 256}


def judged(op, got, want, inputs, **values):
    at = attrs.evolve(op, **values).resolve(NPU2)
    verdict = compare(got, want, at.tolerance(NPU2, inputs=inputs))
    assert verdict.passed, verdict.detail


@pytest.mark.parametrize(
    "cls, params", [(PrefillAttention, GLOBAL), (PrefillSlidingAttention, SLIDING)],
    ids=["global", "sliding"],
)  # fmt: skip
def test_prefill_attention_runs_in_a_graph_on_sim_with_its_rows_per_call(cls, params, tmp_path):
    op = cls(**params, writes_cache=False)
    q, k, v, cache = op.resolve(NPU2).example_inputs(np.random.default_rng(1))

    with Session(cache=tmp_path) as session:

        @graph(backend="sim", device="npu2", session=session)
        def attend(g, q, k, v, cache, *, begin, end):
            return g(op, q, k, v, cache, L_begin=begin, L_end=end)

        for begin, end in [(0, 256), (128, 256), (0, 256)]:
            got = attend(q, k, v, cache, begin=begin, end=end)
            (want,) = op.call_reference(q, k, v, cache, L_begin=begin, L_end=end)[-1:]
            judged(op, got, want, [q, k, v, cache], L_begin=begin, L_end=end)
        streams = session.library.streams
        # one configuration lowered; a stream per distinct range, the repeat served cached
        assert (streams.configurations, streams.streams) == (1, 2)


def test_a_decode_layer_runs_in_a_graph_on_sim_a_token_per_call(tmp_path):
    """A sliding layer writing its cache (a graph state) at positions 0, 1,
    2: each call's output and the cache it leaves, judged against the
    reference run on the cache the reference left."""
    op = DecodeLayer(layer_type="swa", **SMALL_LAYER).resolve(NPU2)
    x, ple, weights, norms, rope, _ = op.example_inputs(np.random.default_rng(2))
    cache = np.zeros((2, op.cache_rows, op.kv_heads, op.dim), x.dtype)

    with Session(cache=tmp_path) as session:

        @graph(backend="sim", device="npu2", session=session)
        def decode(g, x, ple, *, position):
            kv = g.state("cache", cache.shape)
            w = [g.weight(n, a) for n, a in (("w", weights), ("n", norms), ("r", rope))]
            return g(op, x, ple, *w, kv, context_len=position)[-1]

        for position in range(3):
            got = decode(x, ple, position=position)
            inputs = [x, ple, weights, norms, rope, cache]
            cache, want = op.call_reference(*inputs, context_len=position)
            judged(op, got, want, inputs, context_len=position)
        assert session.library.streams.streams == 3


def test_lm_head_runs_in_a_graph_on_sim(tmp_path):
    op = LMHead(dim=256, vocab=2048)
    x, norm, W = op.resolve(NPU2).example_inputs(np.random.default_rng(3))
    with Session(cache=tmp_path) as session:

        @graph(backend="sim", device="npu2", session=session)
        def head(g, x):
            return g(op, x, g.weight("norm", norm), g.weight("W", W))

        judged(op, head(x), op.resolve(NPU2).reference(x, norm, W), [x, norm, W])
        assert session.library.streams.streams == 0  # no dispatch-time value: one sequence


# ---- FLMGemm -------------------------------------------------------------------------


def flm_inputs(op, seed=0):
    return op.resolve(NPU2).example_inputs(np.random.default_rng(seed))


@pytest.mark.parametrize("backend", ["reference", "cpu", "sim"])
def test_flm_gemm_runs_in_a_graph_on_every_backend(backend, tmp_path):
    op = FLMGemm(M=256, K=512, N=1024, epilogue="silu", clamp=(-4.0, 4.0))
    a, packed = flm_inputs(op)
    with Session(cache=tmp_path) as session:

        @graph(backend=backend, device="npu2", session=session)
        def f(g, a):
            return g(op, a, g.weight("b", packed))

        f.compile(a)
        f.load()
        judged(op, f(a), op.resolve(NPU2).reference(a, packed), [a, packed])


@pytest.mark.parametrize("backend", ["reference", "cpu", "sim"])
def test_flm_gemm_binds_m_per_call_one_image_for_every_m(backend, tmp_path):
    """One operator of capacity 768 called at M = 256, 768, 512, 256: rows
    below M within the operator's tolerance of the reference at that M,
    rows M.. exactly the reference's zeros (the device writes them: after
    the 768 call, the 512 call's rows 512..768 must be zeroed again)."""
    op = FLMGemm(K=512, N=1024, max_M=768, epilogue="silu", clamp=(-4.0, 4.0))
    a, packed = flm_inputs(op)
    with Session(cache=tmp_path) as session:

        @graph(backend=backend, device="npu2", session=session)
        def f(g, a, *, rows):
            return g(op, a, g.weight("b", packed), M=rows)

        for m in (256, 768, 512, 256):
            got = f(a, rows=m)
            want = op.resolve(NPU2).reference(a, packed, M=m)
            judged(op, got[:m], want[:m], [a, packed], M=m)
            assert np.array_equal(got[m:].view(np.uint16), want[m:].view(np.uint16)), m
            assert not np.any(got[m:].view(np.uint16)) and np.any(got[:m].view(np.uint16))
        assert len(f.versions) == 1  # one graph version, one image
        if backend == "sim":
            streams = session.streams
            # one configuration; a stream per distinct M, the repeated 256 cached
            assert (streams.configurations, streams.streams) == (1, 3)


@pytest.mark.parametrize("backend", ["reference", "cpu", "sim"])
@pytest.mark.parametrize(
    "rows, rule",
    [(300, r"FLMGemm: M=300: a positive multiple of 256 on npu2 \(64 rows x 4 compute rows\)"),
     (0, r"FLMGemm: M=0: a positive multiple of 256"),
     (1024, r"FLMGemm: M=1024: at most max_M=768 \(A's rows\)")],
    ids=["misaligned", "zero", "past-capacity"],
)  # fmt: skip
def test_a_bad_m_is_refused_before_anything_runs(backend, rows, rule, tmp_path):
    """A step before the FLMGemm writes a state: after the refusal the
    state is what the last good call left."""
    op = FLMGemm(K=512, N=1024, max_M=768)
    a, packed = flm_inputs(op)
    size = a.size
    first = StridedCopy(
        input_buffer_size=size, output_buffer_size=size, sizes=(size,), strides=(1,)
    )
    with Session(cache=tmp_path) as session:

        @graph(backend=backend, device="npu2", session=session)
        def f(g, a, *, rows):
            seen = g.state("seen", (size,))
            g(first, a, seen)  # runs first, in place
            return g(op, a, g.weight("b", packed), M=rows)

        f(a, rows=256)
        with pytest.raises(OperatorError, match=rule):
            f(-a, rows=rows)
        assert np.array_equal(f.read_state("seen").view(np.uint16), a.reshape(-1).view(np.uint16))


def test_an_unbound_m_runs_at_the_operators_own_and_keys_the_cache(tmp_path):
    """M is not part of the identity (max_M is): two graphs of one capacity
    leaving M unbound at 512 and at 256 are two cache entries, and a
    later process gets the rows its own M computes."""
    op = FLMGemm(K=512, N=1024, max_M=512)
    a, packed = flm_inputs(op)
    for m in (512, 256):
        with Session(cache=tmp_path) as session:
            at = FLMGemm(K=512, N=1024, max_M=512, M=m)

            @graph(backend="sim", device="npu2", session=session)
            def f(g, a):
                return g(at, a, g.weight("b", packed))  # noqa: B023 (called in the loop)

            c = f(a)
            assert np.any(c[:m].view(np.uint16)) and not np.any(c[m:].view(np.uint16)), m


def sweep(session, M_values, K, N):
    """One graph of FLMGemm at (K, N), capacity the largest of `M_values`,
    compiled once; then the stream of each M as a call at that M makes it
    (the simulated device's `Library.stream`), without simulating the
    calls."""
    project = projection(session, K, N, max(M_values))
    version = project.compile(a=((max(M_values), K), bf16))
    project.load()
    (step,) = version.image.programs[0].steps
    for m in M_values:
        session.library.stream(step.digest, {"M": m})
    assert len(project.versions) == 1
    return session.library.streams


def test_six_m_compile_one_configuration_and_six_streams(tmp_path):
    K, N = PROJECTIONS["gemma4-e2b k,v"]
    with Session(cache=tmp_path) as session:
        streams = sweep(session, M_VALUES[:6], K, N)
        assert (streams.configurations, streams.streams) == (1, 6)
        sweep(session, M_VALUES[:6], K, N)  # the same operator and M: nothing new
        assert (streams.configurations, streams.streams) == (1, 6)


@pytest.mark.slow
def test_the_sweep_compiles_one_configuration_and_a_stream_per_m(tmp_path, monkeypatch, capsys):
    """One graph version over Llama 3.2 1B's k,v projection, M per call at
    the sweep's 30 values: one configuration, a stream per M, each one
    cache entry (`iron cache info` counts them apart)."""
    K, N = PROJECTIONS["llama3.2-1b k,v"]
    with Session(cache=tmp_path) as session:
        streams = sweep(session, M_VALUES, K, N)
        assert (streams.configurations, streams.streams) == (1, len(M_VALUES)) == (1, 30)
    info = CompileCache(tmp_path).info()
    assert (info["configurations"], info["streams"]) == (1, 30)
    monkeypatch.setenv("IRON_CACHE_HOME", str(tmp_path))
    assert main(["cache", "info"]) == 0
    assert "configurations: 1, streams: 30" in capsys.readouterr().out


def projection(session, K, N, max_M=256):
    """A graph of one FLMGemm at (K, N) of capacity `max_M`, its M per call."""
    packed = FLMGemm(M=256, K=K, N=N).resolve(NPU2).pack_b(np.ones((K, N), np.float32))

    @graph(backend="sim", device="npu2", session=session)
    def project(g, a, *, rows):
        return g(FLMGemm(K=K, N=N, max_M=max_M), a, g.weight("b", packed), M=rows)

    return project


@pytest.mark.slow
def test_every_projection_of_the_sweep_shares_the_configuration(tmp_path):
    """The image holds no K, N nor M: every (K, N) of both models is one
    configuration."""
    with Session(cache=tmp_path) as session:
        for k, n in PROJECTIONS.values():
            streams = sweep(session, (256,), k, n)
        assert (streams.configurations, streams.streams) == (1, len(PROJECTIONS))


# ---- ChunkCopy ----------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["reference", "cpu", "sim"])
def test_one_chunk_copy_image_serves_n_3_1_16_3(backend, tmp_path):
    """The copy lands in a state that persists across calls, so each call's
    result depends on the n before it too; the reference runs the same
    calls on its own copy."""
    op = ChunkCopy(chunk=256, max_chunks=16)
    x = np.random.default_rng(4).standard_normal(op.chunk * op.max_chunks).astype(bf16)
    with Session(cache=tmp_path) as session:

        @graph(backend=backend, device="npu2", session=session)
        def copy(g, x, *, n):
            y = g.state("y", x.shape)
            g(op, x, y, n=n)
            return g(MemCopy(size=x.shape[0]), y)

        want = np.zeros_like(x)
        for n in (3, 1, 16, 3):
            want = op.reference(x - n, want, n=n)
            assert np.array_equal(copy(x - n, n=n).view(np.uint16), want.view(np.uint16)), n
        assert len(copy.versions) == 1  # one image
        if backend == "sim":
            streams = session.library.streams
            assert (streams.configurations, streams.streams) == (1, 3)  # n = 3 twice: cached


@pytest.mark.parametrize("backend", ["reference", "cpu", "sim"])
def test_a_bad_dispatch_time_value_is_refused_before_anything_runs(backend, tmp_path):
    """A step before the bad one writes a state: after the refusal the state
    is what the last good call left."""
    op = ChunkCopy(chunk=256, max_chunks=16)
    size = op.chunk * op.max_chunks
    first = StridedCopy(
        input_buffer_size=size, output_buffer_size=size, sizes=(size,), strides=(1,)
    )
    with Session(cache=tmp_path) as session:

        @graph(backend=backend, device="npu2", session=session)
        def copy(g, x, *, n):
            seen = g.state("seen", (size,))
            g(first, x, seen)  # runs first, in place
            y = g.state("y", (size,))
            g(op, x, y, n=n)
            return g(MemCopy(size=size), y)

        x = np.arange(size).astype(bf16)
        copy(x, n=2)
        with pytest.raises(OperatorError, match=r"ChunkCopy: n=17: between 1 and max_chunks=16"):
            copy(x + 1, n=17)
        assert np.array_equal(copy.read_state("seen").view(np.uint16), x.view(np.uint16))


def test_a_design_parameter_whose_member_is_left_unset_is_refused():
    """Softmax's `valid` carries the member of that name; unbound and None
    it has no word to give (it used to be read as any integer field)."""
    from iron.ops.eltwise.softmax import Softmax

    @graph(backend="sim", device="npu2")
    def soft(g, x):
        return g(Softmax(rows=4, cols=64), x)

    with pytest.raises(
        ValueError,
        match=r"parameter 'valid' carries Softmax's per-call member 'valid', which this step leaves unset",
    ):
        soft(np.zeros((4, 64), bf16))


def test_a_runtime_shaped_program_step_reads_back_from_its_json(tmp_path):
    op = ChunkCopy(chunk=256, max_chunks=16)
    with Session(cache=tmp_path) as session:
        copy = chunk_copier(op, session, device="npu2")
        version = copy.compile(((op.chunk * op.max_chunks,), bf16))
        program = version.image.programs[0]  # an xclbin: a program per step
        step = program.steps[0]
        assert step.stream and step.values == (("n", 0, 0),) and step.params == ()
        assert Program.from_json(program.to_json()) == program
        text = program.to_json().replace('"stream":true', '"stream":1')
        with pytest.raises(ValueError, match=r"steps\[0\]\.stream"):
            Program.from_json(text)


# ---- packaging ------------------------------------------------------------------------


def chunk_copier(op, session, device="npu2"):
    """A graph copying `op`'s n chunks into a state, then returning it."""

    @graph(backend="sim", device=device, session=session)
    def copy(g, x, *, n):
        y = g.state("y", x.shape)
        g(op, x, y, n=n)
        return g(MemCopy(size=x.shape[0]), y)

    return copy


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_runtime_shaped_graphs_are_xclbins_with_a_stream_per_step_on_both_devices(device, tmp_path):
    """The original's rule: a step with a dispatch-time value makes the
    image an xclbin (a stream per step), also on npu2 where a graph without
    one is a fused full ELF; a fused full ELF is refused, naming the rule."""
    from iron.dispatch.packaging import PackagingError

    op = ChunkCopy(chunk=256, max_chunks=16)
    gemm = FLMGemm(M=256, K=512, N=1024, b_format="bf16")  # npu1 has no block floats
    packed = gemm.resolve(Device.from_name(device)).pack_b(np.ones((512, 1024), np.float32))
    with Session(cache=tmp_path) as session:
        copy = chunk_copier(op, session, device=device)

        @graph(backend="sim", device=device, session=session)
        def project(g, a):
            return g(gemm, a, g.weight("b", packed))

        copy.compile(((op.chunk * op.max_chunks,), bf16))
        project.compile(((256, 512), bf16))
        for f, said in [(copy, "step 0 (ChunkCopy) binds n per call"),
                        (project, "step 0 (FLMGemm) is runtime-shaped")]:  # fmt: skip
            (version,) = f.versions.values()
            assert (version.plan.image, version.plan.dispatch) == ("xclbin", "separate")
            assert f"dispatch-time value: {said}" in version.plan.reasons[0]
            assert len(version.image.programs) == len(version.runlist.steps)
            assert version.image.programs[0].steps[0].stream

        @graph(backend="sim", device=device, session=session, mode="fused")
        def fused(g, a):
            return g(gemm, a, g.weight("b", packed))

        with pytest.raises(PackagingError, match=r"dispatch='fused' .* refused: dispatch-time"):
            fused.compile(((256, 512), bf16))


def test_a_new_m_on_the_xclbin_plan_is_one_new_instruction_stream(tmp_path):
    """Three calls at two M on npu2's xclbin plan: one configuration, a
    stream per M, and one instruction stream per M (the repeat reuses it)."""
    K, N = 512, 1024
    with Session(cache=tmp_path) as session:
        project = projection(session, K, N, max_M=512)
        a = np.random.default_rng(5).standard_normal((512, K)).astype(bf16)
        for m in (256, 512, 256):
            project(a, rows=m)
        assert {v.plan.image for v in project.versions.values()} == {"xclbin"}
        streams = session.streams
        assert (streams.configurations, streams.streams) == (1, 2)
        assert len(streams._instructions) == 2


def test_an_xclbin_stream_folds_the_calls_values_and_links_read_core_words_as_rtps(tmp_path):
    """A runtime-shaped step's simulated stream carries the call's values
    (the device takes its sequence at them from `Library.stream`); its
    xclbin link takes the derived words as per call: ChunkCopy's offsets
    only its stream carries, FLMGemm's, which its cores read, are words of
    each core's runtime-parameter buffer that the stream writes."""
    import json

    from iron.dispatch.fusion import xclbin_mlir
    from iron.dispatch.packaging import rtp_params
    from iron.dispatch.pipeline import link_constants
    from iron.dispatch.sim_xrt import stream

    op = ChunkCopy(chunk=256, max_chunks=16)
    with Session(cache=tmp_path) as session:
        copy = chunk_copier(op, session, device="npu2")
        version = copy.compile(((op.chunk * op.max_chunks,), bf16))
        program = version.image.programs[0]
        words = stream("u" * 32, program.steps[0].device, program, {}, {"n": 5})
        text = words.view(np.uint8).tobytes().rstrip(b"\0").decode()
        folded = Program.from_json(json.loads(text)["program"])
        assert folded.steps[0].values == (("n", -1, 5),) and folded.words == ()
        design = version.image.designs[program.steps[0].digest]
        assert link_constants(design, program) == {}
        assert rtp_params(design, program.steps[0]) == frozenset()

        gemm = projection(session, 512, 1024).compile(a=((256, 512), bf16))
        program = gemm.image.programs[0]
        step = program.steps[0]
        design = gemm.image.designs[step.digest]
        constants = link_constants(design, program)
        assert constants == dict.fromkeys(design.params, 0)  # every word comes per call
        rtp = rtp_params(design, step)
        assert rtp == set(design.params)  # FLMGemm's cores read every one
        link = xclbin_mlir(design, step.device, constants, rtp)
        workers = len(design.workers)
        assert link.count('sym_name = "rtp_') == workers
        assert link.count("aiex.set_lock(%rtp_lock.") == workers
        assert "scratchpad" not in link
        # a core reads k_iters, epilogue, the clamp, its slabs and units, and
        # its column's work, idle and zero-chunk counts: eleven words,
        # written before any task
        assert link.count("aiex.npu.rtp_write(") == 11 * workers
        assert link.index("aiex.npu.rtp_write(") < link.index("aiex.dma_configure_task_for")


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_flm_gemm_on_a_sim_xclbin_runs_its_words_as_runtime_parameters(device, tmp_path):
    """On either device's xclbin plan the simulated XRT runs FLMGemm in the
    xclbin's form: each core reads its words from its runtime-parameter
    buffer, which the stream writes before releasing it; the output is the
    reference's within the operator's tolerance, and the summary says how
    the words reach the cores."""
    from iron.design import check
    from iron.design.lower import WriteRtp

    npu = Device.from_name(device)
    K, N = 512, 1024
    gemm = FLMGemm(M=256, K=K, N=N, b_format="bf16")  # npu1 has no block floats
    b = np.random.default_rng(3).standard_normal((K, N)).astype(np.float32)
    packed = gemm.resolve(npu).pack_b(b)
    with Session(cache=tmp_path) as session:

        @graph(backend="sim", device=device, session=session)
        def project(g, a):
            return g(gemm, a, g.weight("b", packed))

        a = np.random.default_rng(4).standard_normal((256, K)).astype(bf16)
        got = project(a)
        (version,) = project.versions.values()
        assert version.plan.image == "xclbin"
        at = gemm.resolve(npu)
        want = at.reference(a, packed)
        verdict = compare(got, want, at.tolerance(npu, inputs=(a, packed)))
        assert verdict.passed, verdict.detail
        simulators = list(session.library._streamed.values())
        assert simulators  # the step ran a stream
        for simulator in simulators:
            config = simulator.lowered.configuration
            assert {b.worker for b in config.rtps} == {w.name for w in simulator.design.workers}
            # its cores read their slab counts first: they wait for every call's words
            assert all(b.each_iteration for b in config.rtps)
            writes = [op for op in simulator.lowered.runtime.ops if isinstance(op, WriteRtp)]
            assert len(writes) == 11 * len(config.rtps)  # eleven words a core reads
            # the buffers and their locks fit beside what the cores hold
            design = simulator.design
            assert check(design, rtp=frozenset(design.params)).ok
        said = project.summary()
        assert "(FLMGemm).k_iters, " in said
        assert "a runtime-parameter write by the step's sequence" in said
