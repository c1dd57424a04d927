"""Packaging: a full ELF or an xclbin by the original IRON's rules, the
refusals, each per-call value's lowering, the aiecc command lines of the
xclbin chain, and xclbin images on the simulated XRT."""

import json
from pathlib import Path

import attrs
import numpy as np
import pytest
from dispatch_fakes import AddK, AddOne, Twice

from iron.core import Device, bf16
from iron.core.capture import Graph
from iron.design.aiecc import XCLBIN_NAME_LIMIT
from iron.dispatch import Runlist, Session, graph
from iron.dispatch.packaging import PackagingError, param_uses, plan
from iron.dispatch.pipeline import SIM_XCLBIN, xclbin_record
from iron.dispatch.program import step_design
from iron.dispatch.sim_xrt import stream

SIZE = 1024


@attrs.frozen
class AddN(AddK):
    """AddK as a runtime-shaped operator: its sequence is built per k, so k
    is a dispatch-time value."""

    def sequence(self, *, k):
        return self.design(self.size, self.tile, self.device)


def runlist(op=AddK, bind=True):
    g = Graph("f")
    x = g.input("x", (SIZE,), np.int32)
    pos = g.scalar("pos")
    y = g(op(SIZE), x, k=pos * 2 + 1) if bind else g(AddOne(SIZE), x)
    return Runlist.from_graph(g, inputs=["x"], outputs=[y.name], device=Device.from_name("npu2"))


NPU1, NPU2 = Device.from_name("npu1"), Device.from_name("npu2")


@pytest.mark.parametrize(
    "device, op, boundaries, want",
    [
        (NPU2, AddK, None, ("elf", "fused", ())),
        (NPU1, AddK, None, ("xclbin", "separate", ("npu1 runs xclbins",))),
        (NPU2, AddN, None, ("xclbin", "separate", ("dispatch-time value",))),
        (NPU2, AddK, "each_step", ("xclbin", "separate", ("step boundaries asked for",))),
        (NPU1, AddN, "each_step", ("xclbin", "separate", ("dispatch-time value",
                                    "npu1 runs xclbins", "step boundaries asked for"))),
    ],
)  # fmt: skip
def test_each_rule_makes_an_xclbin_and_says_so(device, op, boundaries, want):
    got = plan(device, runlist(op), boundaries=boundaries)
    image, dispatch, rules = want
    assert (got.image, got.dispatch) == (image, dispatch)
    assert [r.split(":")[0] for r in got.reasons] == list(rules)


def test_compare_is_step_by_step_on_an_xclbin():
    got = plan(NPU2, runlist(), dispatch="compare")
    assert (got.image, got.dispatch) == ("xclbin", "compare")
    assert plan(NPU2, runlist(), image="xclbin").dispatch == "separate"


@pytest.mark.parametrize(
    "device, op, kw, rule",
    [
        (NPU1, AddK, {"image": "elf"}, "image='elf' is refused: npu1 runs xclbins"),
        (NPU2, AddN, {"image": "elf"}, "image='elf' is refused: dispatch-time value: step 0 "
                                       r"\(AddN\) binds k per call"),
        (NPU2, AddK, {"image": "elf", "boundaries": "each_step"},
         "image='elf' is refused: step boundaries asked for"),
        (NPU1, AddK, {"dispatch": "fused"}, "dispatch='fused' needs a full ELF and is refused: "
                                            "npu1 runs xclbins"),
        (NPU2, AddN, {"dispatch": "fused"}, "dispatch='fused' .* dispatch-time value"),
        (NPU2, AddK, {"dispatch": "fused", "image": "xclbin"},
         "dispatch='fused' .* image='xclbin' was asked for"),
    ],
)  # fmt: skip
def test_a_force_a_rule_forbids_is_refused_naming_the_rule(device, op, kw, rule):
    with pytest.raises(PackagingError, match=f"f: {rule}"):
        plan(device, runlist(op), **kw)


def test_bad_plan_arguments_are_refused():
    for kw, rule in [({"image": "pdi"}, "image='pdi'"), ({"boundaries": 1}, "boundaries=1"),
                     ({"dispatch": "fast"}, "dispatch='fast'")]:  # fmt: skip
        with pytest.raises(ValueError, match=rule):
            plan(NPU2, runlist(), **kw)


def test_a_graph_function_refuses_a_forced_fused_elf_on_npu1_before_compiling():
    f = graph(lambda g, x: g(AddOne(SIZE), x), backend="sim", device="npu1", mode="fused")
    with pytest.raises(PackagingError, match="npu1 runs xclbins"):
        f(np.zeros(SIZE, np.int32))
    assert not f.versions


def test_each_per_call_value_says_how_it_is_lowered():
    def body(g, x, *, pos):
        return g(Twice(SIZE), g(AddK(SIZE), x, k=pos * 2 + 1))

    from iron.ops.eltwise import MemCopy, StridedCopy  # an offset use: its stream changes

    def offsets(g, row, *, pos):
        cache = g.state("cache", (1024,))
        op = StridedCopy(input_buffer_size=64, output_buffer_size=1024, sizes=(64,), strides=(1,))
        g(op, row, cache, out_offset=pos * 64)
        return g(MemCopy(size=1024), cache)

    lines = {}
    for device in ("npu1", "npu2"):
        f = graph(body, backend="sim", device=device)
        f(np.zeros(SIZE, np.int32), pos=1)
        lines[device] = f.summary()
    assert "elf image, fused dispatch" in lines["npu2"]
    assert "step 0 (AddK).k = 2*pos + 1: patched through the parameter scratchpad" in lines["npu2"]
    assert "xclbin image, separate dispatch (npu1 runs xclbins" in lines["npu1"]
    # AddK's core reads k: a runtime-parameter write by the sequence
    assert (
        "step 0 (AddK).k = 2*pos + 1: a dispatch-time scalar: a runtime-parameter" in lines["npu1"]
    )
    f = graph(offsets, backend="sim", device="npu1")
    row = np.arange(64, dtype=np.float32).astype(bf16)
    out = f(row, pos=3)
    assert out[192:256].tobytes() == row.tobytes() and not out[:192].any()
    assert "(StridedCopy).out_offset = 64*pos: a dispatch-time scalar: a new value regenerates" in (
        f.summary()
    )


def test_param_uses_tell_an_offset_from_a_core_read():
    from iron.ops.eltwise import StridedCopy

    add_k = step_design(AddK(SIZE).resolve(NPU2), "t")
    assert param_uses(add_k) == {"k": frozenset({"core"})}
    copy = StridedCopy(input_buffer_size=64, output_buffer_size=1024, sizes=(64,), strides=(1,))
    uses = param_uses(step_design(copy.resolve(NPU2), "t"))
    assert uses == {"in_offset": frozenset({"offset"}), "out_offset": frozenset({"offset"})}


# ---- xclbin images ------------------------------------------------------------------


def test_an_xclbin_image_has_one_kernel_per_distinct_design_with_short_instance_names():
    @graph(backend="sim", device="npu1", name="a_graph_function_with_a_long_name" * 3)
    def f(g, x, *, pos):
        h = g(AddK(SIZE), g(AddOne(SIZE), x), k=pos)
        return g(AddOne(SIZE), g(AddK(SIZE), h, k=pos + 1))

    f.compile(((SIZE,), np.int32))
    (version,) = f.versions.values()
    record = json.loads(Path(version.image.xclbin).read_text())
    assert record == xclbin_record(version.image)
    names = [k["name"] for k in record["kernels"]]
    assert [n.split("_")[0] for n in names] == ["AddOne", "AddK"]
    assert [k["id"] for k in record["kernels"]] == [0x901, 0x902]
    assert all(len(k["instance"]) < XCLBIN_NAME_LIMIT for k in record["kernels"])
    assert Path(version.image.xclbin).name == SIM_XCLBIN
    # the steps' streams: a step whose values are constants has its module written
    entry = Path(version.image.xclbin).parent
    assert sorted(p.name for p in entry.glob("program*.mlir")) == ["program0.mlir", "program3.mlir"]
    text = (entry / "program0.mlir").read_text()
    assert "load_pdi" not in text and "scratchpad" not in text


# ---- the simulated XRT running xclbins --------------------------------------------------


def loaded(device="npu1"):
    @graph(backend="sim", device=device)
    def f(g, x, *, pos):
        return g(AddOne(SIZE), g(AddK(SIZE), x, k=pos))

    f(np.zeros(SIZE, np.int32), pos=0)
    (version,) = f.versions.values()
    return f, version


def test_per_call_values_reach_an_xclbin_as_new_streams_cached_by_value():
    f, version = loaded()
    x = np.arange(SIZE, dtype=np.int32)
    for pos in (3, 1, 3):
        assert np.array_equal(f(x, pos=pos), x + pos + 1)
    # the session's Streams keeps them: per entry and step, by stream_key
    made = [key for key in f.session.streams._instructions if key[0] == version.image.xclbin]
    assert sorted(p for (_, i, (_, p, _)) in made if i == 0) == [
        (("k", 0),),
        (("k", 1),),
        (("k", 3),),
    ]
    assert [p for (_, i, (_, p, _)) in made if i == 1] == [()]  # AddOne's one static stream
    # the device ran AddK in the xclbin's form: k a word of its core's buffer
    add_k = version.image.programs[0].steps[0].digest
    lowered = f.session.library.simulators[add_k, frozenset({"k"})].lowered
    assert [b.params for b in lowered.configuration.rtps] == [("k",)]
    assert (add_k, frozenset()) not in f.session.library.simulators


def test_the_simulated_xclbin_refuses_foreign_and_unsynced_streams():
    f, version = loaded()
    xrt, executable = f.backend.xrt, version.executable
    device = executable.xrt_device
    kernel = executable.runs[0]
    args = executable._arguments()
    program = version.image.programs[0]
    good = stream(kernel.context.xclbin.uuid, kernel.name, program, {"k": 2}, {})
    for uuid, name, rule in [("f" * 32, kernel.name, "does not belong to the loaded xclbin"),
                             (kernel.context.xclbin.uuid, "other", "does not belong")]:  # fmt: skip
        foreign = stream(uuid, name, program, {"k": 2}, {})
        bo = xrt.instruction_bo(device, foreign.nbytes, kernel)
        np.frombuffer(bo.map(), np.uint32)[: foreign.size] = foreign
        bo.sync(xrt.TO_DEVICE, foreign.nbytes, 0)
        with pytest.raises(RuntimeError, match=rule):
            kernel(3, bo, foreign.size, *args)
    bo = xrt.instruction_bo(device, good.nbytes, kernel)
    np.frombuffer(bo.map(), np.uint32)[: good.size] = good  # written, never synced
    with pytest.raises(RuntimeError, match=r"holds no stream \(was it synced to the device\?\)"):
        kernel(3, bo, good.size, *args)
    bo.sync(xrt.TO_DEVICE, good.nbytes, 0)
    with pytest.raises(ValueError, match="opcode 4, not 3"):
        kernel(4, bo, good.size, *args)
    with pytest.raises(ValueError, match="do not fit the"):
        kernel(3, bo, good.size + 1, *args)
    assert kernel(3, bo, good.size, *args).wait() == "ERT_CMD_STATE_COMPLETED"
    with pytest.raises(RuntimeError, match="has no kernel 'main:sequence'"):
        xrt.xclbin_kernel(kernel.context, "main:sequence")
    with pytest.raises(RuntimeError, match="no xclbin with uuid 'nope' is registered"):
        xrt.hw_context(device, "nope")


def test_compare_on_an_xclbin_judges_every_step():
    @graph(backend="sim", device="npu1", mode="compare")
    def f(g, x, *, pos):
        return g(AddOne(SIZE), g(AddK(SIZE), x, k=pos))

    f(np.zeros(SIZE, np.int32), pos=4)
    (version,) = f.versions.values()
    assert version.plan.dispatch == "compare"
    assert [(r.operator, r.passed) for r in version.reports] == [("AddK", True), ("AddOne", True)]


# ---- a cache hit builds nothing ---------------------------------------------------------


@pytest.mark.parametrize("device", ["npu1", "npu2"])
def test_a_cache_hit_builds_no_design_and_no_program(monkeypatch, device):
    import iron.dispatch.image as image_module
    import iron.dispatch.program as program_module

    built = {"designs": 0, "programs": 0}
    design_of, plan_programs = program_module.design_of, image_module.plan_programs

    def counted_design(op):
        built["designs"] += 1
        return design_of(op)

    def counted_programs(*args):
        built["programs"] += 1
        return plan_programs(*args)

    monkeypatch.setattr(program_module, "design_of", counted_design)
    monkeypatch.setattr(image_module, "plan_programs", counted_programs)

    def body(g, x, *, pos):
        for _ in range(4):
            x = g(AddOne(SIZE), g(AddK(SIZE), x, k=pos))
        return x

    session = Session()
    x = np.arange(SIZE, dtype=np.int32)
    cold = graph(body, backend="sim", device=device, session=session)
    assert np.array_equal(cold(x, pos=2), x + 12)
    assert built["designs"] == 2 and built["programs"] == 1
    warm = graph(body, backend="sim", device=device, session=session)
    warm.compile(((SIZE,), np.int32))
    assert session.backend("sim").hits == 1
    assert built == {"designs": 2, "programs": 1}  # nothing more
    assert np.array_equal(warm(x, pos=3), x + 16)


def test_cache_info_shows_each_entrys_packaging(capsys):
    from iron.core.cli import main

    def body(g, x, *, pos):
        return g(AddK(SIZE), x, k=pos + 2)

    for device in ("npu1", "npu2"):
        graph(body, backend="sim", device=device).compile(((SIZE,), np.int32))
    assert main(["cache", "info"]) == 0
    shown = capsys.readouterr().out
    assert "    elf image (no rule asks for an xclbin)" in shown
    assert "    xclbin image (npu1 runs xclbins: Phoenix loads xclbins" in shown
    assert "      step 0 (AddK).k = pos + 2: patched through the parameter scratchpad" in shown
    assert "      step 0 (AddK).k = pos + 2: a dispatch-time scalar: a runtime-parameter" in shown


def test_an_xclbin_keeps_its_most_recent_streams(monkeypatch):
    from iron.dispatch.streams import Streams

    monkeypatch.setattr(Streams, "KEPT_INSTRUCTIONS", 3)
    f, _ = loaded()
    x = np.arange(SIZE, dtype=np.int32)
    for pos in (1, 2, 3, 4, 2):
        assert np.array_equal(f(x, pos=pos), x + pos + 1)
    kept = [(i, p) for (_, i, (_, p, _)) in f.session.streams._instructions]
    assert kept == [(0, (("k", 3),)), (0, (("k", 4),)), (0, (("k", 2),))]
