"""The backend seam, the simulated NPU and its memory semantics."""

import numpy as np
import pytest
from dispatch_fakes import Blurry, Mul, N, Scale, Shift, Sloppy, expected_outputs, make_model

from iron.core import bf16, capture, compare, hookimpl, registry
from iron.core.settings import SettingsError
from iron.dispatch import (
    Backend,
    BackendUnavailable,
    CompileError,
    Executable,
    GranuleError,
    OperatorSequence,
    Session,
    get_backend,
    graph,
    run,
)
from iron.dispatch.executable import allocate
from iron.dispatch.memory import Arena
from iron.dispatch.runtime import XrtExecutable
from iron.dispatch.selection import auto_choice
from iron.dispatch.session import SessionClosed
from iron.dispatch.sim_xrt import SimBufferObject


def rows(n, seed):
    return np.random.default_rng(seed).standard_normal((n, N)).astype(bf16)


@pytest.fixture
def weight():
    return np.random.default_rng(11).standard_normal(N).astype(bf16)


CALLS = [(4, 0, 21), (1, 4, 22), (1, 5, 23), (3, 6, 24)]  # rows, pos, seed: prefill then decodes


@pytest.mark.parametrize("ahead", [True, False], ids=["aot", "jit"])
@pytest.mark.parametrize(
    ("backend", "mode", "device"),
    [("reference", "fused", "npu2"), ("sim", "fused", "npu2"), ("sim", "separate", "npu2"),
     ("sim", "auto", "npu1"), ("sim", "compare", "npu1")],
)  # fmt: skip
def test_every_backend_and_mode_gives_the_same_bits(weight, backend, mode, device, ahead):
    model = make_model(weight, backend=backend, mode=mode, device=device)
    if ahead:
        for n in sorted({n for n, _, _ in CALLS}):
            model.compile(((n, N), bf16))
        model.load()
    calls = [(rows(n, seed), pos) for n, pos, seed in CALLS]
    got = [model(x, pos=pos) for x, pos in calls]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in expected_outputs(weight, calls)]


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_a_weight_that_is_never_flushed_is_stale_on_the_device(weight, monkeypatch, device):
    """IRON shipped this bug (swiglu_decode read stale weights on its first
    call): host writes reach the device only through a sync. Skipping the
    flush must give wrong numbers, or the real flush would go untested."""
    x = rows(1, 1)
    right = expected_outputs(weight, [(x, 0)])[0]
    monkeypatch.setattr(Arena, "flush", lambda self, name: None)
    stale = make_model(weight, backend="sim", device=device)
    assert stale(x, pos=0).tobytes() != right.tobytes()
    # the run went through the XRT seam: the arena is a simulated buffer object
    (version,) = stale.versions.values()
    assert isinstance(version.executable, XrtExecutable)
    assert isinstance(stale.residents.memory.buffer.bo, SimBufferObject)
    unified = make_model(
        weight, backend="reference"
    )  # host and device share bytes: nothing to flush
    assert unified(x, pos=0).tobytes() == right.tobytes()
    monkeypatch.undo()
    assert make_model(weight, backend="sim", device=device)(x, pos=0).tobytes() == right.tobytes()


def test_state_reads_follow_the_device(weight):
    model = make_model(weight, backend="sim")
    x = rows(2, 3)
    model(x, pos=1)
    buffer = model.residents.memory.buffer
    state = model.residents.states["cache"]
    offset, nbytes = state.offset, state.nbytes
    assert not buffer.host[
        offset : offset + nbytes
    ].any()  # fused: the run left state on the device
    cache = model.read_state("cache")
    assert (
        cache[1:3].tobytes()
        == (x.astype(np.float32) * weight.astype(np.float32)).astype(bf16).tobytes()
    )


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_compare_mode_flags_the_step_whose_reference_is_wrong(device):
    @graph(backend="sim", mode="compare", device=device)
    def chain(g, x):
        a = g(Scale(N, 0.5), x)
        b = g(Sloppy(N, 2.0), a)  # its device model and its reference disagree
        return g(Scale(N, 3.0), b)

    x = rows(1, 4)[0]
    chain(x)
    reports = next(iter(chain.versions.values())).reports
    assert [(r.index, r.operator, r.passed) for r in reports] == [
        (0, "Scale", True),
        (1, "Sloppy", False),
        (2, "Scale", True),
    ]
    assert reports[1].max_abs >= 0.9 and "elements outside" in reports[1].detail


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_compare_mode_judges_with_the_inputs_and_values_the_device_had(device):
    @graph(backend="sim", mode="compare", device=device)
    def scaled(g, x, *, n):
        return g(Blurry(N), g(Scale(N, 4.0), x), valid=n + 1)

    x = rows(1, 5)[0]
    scaled(x, n=2)
    (version,) = scaled.versions.values()
    assert [(r.operator, r.passed) for r in version.reports] == [("Scale", True), ("Blurry", True)]
    # what the step is judged by: without the device's inputs and the call's
    # valid, the same result fails
    h = (x.astype(np.float32) * 4).astype(bf16)
    device_result = Blurry(N).simulate(h, valid=3)
    (expected,) = Blurry(N).call_reference(h, valid=3)
    assert not compare(device_result, expected, Blurry(N).tolerance())
    assert not compare(device_result, expected, Blurry(N).tolerance(inputs=[h]))  # valid 1
    assert compare(device_result, expected, Blurry(N, valid=3).tolerance(inputs=[h]))


def test_a_backend_that_cannot_compare_refuses_compare_mode():
    seq = many_values(1)
    reference = get_backend("reference")
    with pytest.raises(
        ValueError, match=r"backend 'reference' has no mode 'compare' \(modes: fused, separate\)"
    ):
        reference.compile(seq.runlist, seq.layout, "compare")
    compare_image = get_backend("sim").compile(seq.runlist, seq.layout, "compare")
    with pytest.raises(ValueError, match="backend 'reference' has no mode 'compare'"):
        reference.load(compare_image, allocate(compare_image, granule=64, unified=True))

    @graph(backend="reference", mode="compare")
    def plain(g, x):
        return g(Scale(N), x)

    with pytest.raises(ValueError, match="backend 'reference' has no mode 'compare'"):
        plain(rows(1, 6)[0])


def test_registered_backends_follow_the_protocol():
    for name in ("reference", "sim", "npu"):
        assert isinstance(get_backend(name), Backend), name
    seq = many_values(1)
    image = get_backend("sim").compile(seq.runlist, seq.layout)
    executable = get_backend("sim").load(image, allocate(image, granule=64, unified=False))
    assert isinstance(executable, Executable)
    assert not isinstance(object(), Backend)


def test_granule_sharing_buffers_cannot_be_synced_alone():
    tiny = 50  # bf16 elements: 100 B buffers
    runlist = [(Mul(tiny), "x", "w", "t"), (Mul(tiny), "t", "v", "y")]
    sizes = {"w": 2 * tiny, "v": 2 * tiny}
    weights = {"w": np.ones(tiny, bf16), "v": np.ones(tiny, bf16)}
    packed = OperatorSequence("packed", runlist, ["x"], ["y"], buffer_sizes=sizes, alignment=4)
    assert packed.layout.scratch["v"][0] < 128  # w and v share a 64 B granule
    with pytest.raises(
        GranuleError, match="'w' \\[0, 100\\) shares a 64-byte coherence granule with 'v'"
    ):
        run(packed, {"x": np.ones(tiny, bf16)}, buffers=weights, backend="sim")
    aligned = OperatorSequence(
        "aligned", runlist, ["x"], ["y"], buffer_sizes=sizes
    )  # the default: one granule each
    out = run(aligned, {"x": np.full(tiny, 2, bf16)}, buffers=weights, backend="sim")
    assert (out["y"] == 2).all()


def many_values(n):
    with capture("many") as g:
        x = g.input("x", N)
        pos = g.scalar("pos")
        for i in range(n):
            x = g(Shift(N), x, offset=pos + i)
        g(Shift(N), x, offset=pos + 0)  # the same expression again: the same word
    return OperatorSequence.from_graph(g)


def test_parameter_scratchpad_has_32_words_and_shares_them():
    backend = get_backend("sim")
    seq = many_values(32)
    image = backend.compile(seq.runlist, seq.layout, "fused")
    assert len(image.parameters) == 32
    assert image.steps[0].words == image.steps[-1].words  # pos + 0 twice: one word
    with pytest.raises(
        CompileError, match="33 distinct per-call values exceed the parameter scratchpad's 32 words"
    ):
        seq = many_values(33)
        backend.compile(seq.runlist, seq.layout, "fused")
    x = np.zeros(N, bf16)
    (got,) = run(
        many_values(33), {"x": x}, values={"pos": 1}, backend="sim", mode="separate"
    ).values()
    want = np.zeros(N, bf16)
    for offset in [1 + i for i in range(33)] + [1]:  # one bf16 rounding per step
        want = (want.astype(np.float32) + offset).astype(bf16)
    assert got.tobytes() == want.tobytes()


# ---- choosing a backend ----


def test_auto_picks_sim_without_an_npu_and_says_why_npu_was_passed_over(npu_stack):
    npu_stack(present=False)
    chosen, passed_over = auto_choice()
    assert chosen == "sim" and passed_over["npu"].startswith("mlir-aie is missing")
    assert get_backend().name == "sim"


def test_with_the_npu_stack_present_npu_still_needs_aiecc_and_peano(npu_stack, monkeypatch):
    npu_stack(present=True)
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("MLIR_AIE_INSTALL_DIR", raising=False)
    monkeypatch.setenv("PEANO_INSTALL_DIR", "/nonexistent-peano")
    chosen, passed_over = auto_choice()
    assert chosen == "sim" and "cannot compile designs here; missing aiecc" in passed_over["npu"]


def test_a_session_makes_each_backend_once_and_closing_it_frees_them():
    session = Session()
    sim = session.backend("sim")
    assert session.backend("sim") is sim and get_backend("sim") is not sim
    sim.xrt.library.hosts["k"] = len
    session.close()
    assert sim.xrt.library.hosts == {}
    with pytest.raises(
        SessionClosed, match="this session is closed; backend 'sim' needs an open one"
    ):
        session.backend("sim")


def test_a_backend_factory_must_make_an_object_of_its_name():
    class Plugin:
        @staticmethod
        @hookimpl
        def iron_register_backends(register):
            register("misnamed", "iron.dispatch.backends.sim:SimBackend")

    registry.register_plugin(Plugin, name="misnamed-backend")
    try:
        with pytest.raises(
            registry.RegistryError,
            match=r"backend 'misnamed' \(from plugin 'misnamed-backend'\) made an object named 'sim'",
        ):
            Session().backend("misnamed")
    finally:
        registry.unregister_plugin("misnamed-backend")


def test_iron_backend_overrides_the_default(monkeypatch, weight):
    monkeypatch.setenv("IRON_BACKEND", "reference")
    assert get_backend().name == "reference"
    assert make_model(weight, backend=None).backend.name == "reference"
    assert make_model(weight, backend="sim").backend.name == "sim"  # an explicit choice wins
    monkeypatch.setenv("IRON_BACKEND", "gpu")
    with pytest.raises(SettingsError, match="IRON_BACKEND='gpu': not a registered backend"):
        get_backend()


def test_iron_device_and_poison_are_the_graph_defaults(monkeypatch, weight):
    monkeypatch.setenv("IRON_DEVICE", "npu1")
    monkeypatch.setenv("IRON_POISON", "1")
    model = graph(lambda g, x: g(Scale(N), x))
    assert (model.device.name, model.poison) == ("npu1", True)
    assert graph(lambda g, x: x, device="npu2", poison=False).device.name == "npu2"
    monkeypatch.setenv("IRON_DEVICE", "npu9")
    with pytest.raises(ValueError, match="IRON_DEVICE='npu9': unknown device 'npu9'"):
        graph(lambda g, x: x)


def test_npu_backend_names_what_is_missing(weight, npu_stack):
    npu_stack(present=False)
    npu = get_backend("npu")
    ok, why = npu.available()
    assert not ok
    for piece in ("mlir-aie is missing", "pyxrt is missing", "NPU device is missing"):
        assert piece in why
    assert "Xilinx/mlir-aie releases" in why and "amdxdna" in why
    with pytest.raises(
        BackendUnavailable, match="backend 'npu' is not available here: mlir-aie is missing"
    ):
        make_model(weight, backend="npu")(rows(1, 0), pos=0)


def test_unknown_backend_and_mode():
    registered = ", ".join(sorted(registry.backends()))
    assert {"npu", "reference", "sim"} <= set(registry.backends())
    with pytest.raises(KeyError, match=f"unknown backend 'gpu'; registered backends: {registered}"):
        get_backend("gpu")
    with pytest.raises(ValueError, match="backend 'sim' has no mode 'turbo'"):
        seq = many_values(1)
        get_backend("sim").compile(seq.runlist, seq.layout, "turbo")
