"""The compile pipeline with a toolchain: kernel objects by recipe, aiecc
with iron.design's flags, failures that leave nothing behind. Stand-in
tools record how they were called; the real ones run under the
`toolchain` marker."""

import json
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
from dispatch_fakes import AddK, AddOne, Twice

from iron.core import Device
from iron.design import Toolchain, ToolchainError, find_toolchain
from iron.dispatch import CompileCache, OperatorSequence, Session
from iron.dispatch.backends.sim import SimBackend
from iron.dispatch.runtime import scratchpad_layout

SIZE = 1024
NPU1 = Device.from_name("npu1")

# a stand-in for a tool: logs its arguments, then writes what it is asked to
TOOL = """#!{python}
import json, pathlib, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps([pathlib.Path(sys.argv[0]).name, *args]) + "\\n")
{body}
"""
PEANO_BODY = "pathlib.Path(args[args.index('-o') + 1]).write_bytes(b'object')"
AIECC_BODY = """
out = pathlib.Path([a for a in args if a.startswith('--output-dir=')][0].split('=', 1)[1])
for name in ('add_one_i32.o', 'add_k_i32.o'):
    assert not (out / 'program.mlir').read_text().count(name) or (out / name).is_file(), name
(out / 'program.elf').write_bytes(b'ELF')
if '--get-scratchpad-parameters' in args:
    (out / 'params.txt').write_text('1\\nw0 0 i32 core\\n')
"""
# an aiecc that writes what an xclbin chain asks of it: the xclbin, extending
# the given one (recorded in the file), or an instruction stream
XCLBIN_BODY = """
out = pathlib.Path([a for a in args if a.startswith('--output-dir=')][0].split('=', 1)[1])
named = dict(a[2:].split('=', 1) for a in args if a.startswith('--') and '=' in a)
if '--get-xclbin' in args:
    before = pathlib.Path(named['xclbin-input']).read_text() if 'xclbin-input' in named else ''
    (out / named['xclbin-name']).write_text(before + named['xclbin-kernel-name'] + '\\n')
if '--get-npu-insts' in args:
    (out / named['npu-insts-name']).write_bytes(b'\\0\\0\\0\\1')
"""
# the chain's aiecc, also keeping each stream's MLIR (the scratch directory goes)
KEEPING_BODY = (
    XCLBIN_BODY
    + """
if '--get-npu-insts' in args:
    kept = pathlib.Path({log!r}).with_name('streams')
    kept.mkdir(exist_ok=True)
    (kept / f'{{len(list(kept.iterdir()))}}.mlir').write_text((out / 'program.mlir').read_text())
"""
)
FAILING_BODY = (
    "sys.stderr.write(\"error: 'aie.device' op tile (0, 2) is out of locks\\n\"); sys.exit(3)"
)


def _tool(path: Path, log: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TOOL.format(python=sys.executable, log=str(log), body=body))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def tools(tmp_path):
    log = tmp_path / "calls.log"
    peano = tmp_path / "peano"
    _tool(peano / "bin" / "clang++", log, PEANO_BODY)

    def make(aiecc_body=AIECC_BODY):
        aiecc = _tool(tmp_path / "bin" / "aiecc", log, aiecc_body)
        return Toolchain(aiecc, peano), log

    return make


class ToolchainSim(SimBackend):
    """The sim backend's compile, with the toolchain given."""

    def __init__(self, toolchain):
        super().__init__(Session())
        self._toolchain = toolchain

    def toolchain(self):
        return self._toolchain


def sequence(*ops):
    entries, buffer = [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        entries.append((op, buffer, out))
        buffer = out
    return OperatorSequence("seq", entries, ["x"], ["y"], device=NPU1)


def calls(log: Path, tool: str) -> list[list[str]]:
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [row[1:] for row in rows if row[0] == tool]


def test_aiecc_compiles_each_program_with_the_design_flags(tools):
    toolchain, log = tools()
    seq = sequence(AddOne(SIZE), AddK(SIZE))  # k unbound: the constant 0, no scratchpad
    image = ToolchainSim(toolchain).compile(seq.runlist, seq.layout, trace_size=256)
    (elf,) = image.elves
    assert elf.endswith("program0.elf") and Path(elf).read_bytes() == b"ELF"
    (aiecc,) = calls(log, "aiecc")
    assert "--get-full-elf" in aiecc and "--dynamic-objFifos" in aiecc
    assert "--expand-load-pdis" in aiecc and "--get-input-with-addresses" in aiecc
    assert "--get-scratchpad-parameters" not in aiecc
    assert f"--peano={toolchain.peano}" in aiecc
    entry = Path(elf).parent
    assert (entry / "program0.mlir").is_file()
    recipes = json.loads((entry / "recipes.json").read_text())
    assert set(recipes) == {"add_one_i32.o", "add_k_i32.o"}
    assert all(r["target"] == "aie2-none-unknown-elf" for r in recipes.values())


def test_a_separate_image_is_an_xclbin_chain_and_static_instruction_streams(tools):
    toolchain, log = tools(XCLBIN_BODY)
    seq = sequence(AddOne(SIZE), AddK(SIZE), AddOne(SIZE))  # k unbound: the constant 0
    image = ToolchainSim(toolchain).compile(seq.runlist, seq.layout, mode="separate")
    links = [c for c in calls(log, "aiecc") if "--get-xclbin" in c]
    assert len(links) == 2  # one link per distinct design, not per step
    first, second = ({a.split("=")[0]: a for a in c} for c in links)
    assert "--xclbin-input" not in first
    assert second["--xclbin-input"].endswith(".chain0.xclbin")
    assert first["--xclbin-kernel-id"] == "--xclbin-kernel-id=0x901"
    assert second["--xclbin-kernel-id"] == "--xclbin-kernel-id=0x902"
    assert first["--xclbin-kernel-name"].split("=")[1].startswith("AddOne_")
    assert all(c.count(f"--peano={toolchain.peano}") == 1 for c in links)
    entry = Path(image.xclbin).parent
    # the last xclbin holds every kernel, each added to the one before
    kernels = Path(image.xclbin).read_text().split()
    assert [k.split("_")[0] for k in kernels] == ["AddOne", "AddK"]
    assert sorted(p.name for p in entry.glob("*.xclbin")) == ["image.xclbin"]
    streams = [c for c in calls(log, "aiecc") if "--get-npu-insts" in c]
    assert len(streams) == 3  # each step's stream, its values constants: instructions only
    assert all(not any(a.startswith("--peano") for a in c) for c in streams)
    assert [Path(e).name for e in image.elves] == [f"program{i}.insts.bin" for i in range(3)]


def test_a_per_call_value_a_core_reads_is_a_runtime_parameter_of_the_xclbin(tools):
    """AddK with k bound per call on npu1: the link's core reads k from its
    runtime-parameter buffer; no stream is compiled at link time (each
    call's, which writes k, is compiled for its value)."""
    from iron.core.capture import Graph
    from iron.dispatch import Runlist, plan_layout

    toolchain, log = tools(XCLBIN_BODY)
    g = Graph("bound")
    y = g(AddK(SIZE), g.input("x", (SIZE,), "int32"), k=g.scalar("pos"))
    runlist = Runlist.from_graph(g, inputs=["x"], outputs=[y.name], device=NPU1)
    layout, _, _ = plan_layout(runlist)
    image = ToolchainSim(toolchain).compile(runlist, layout, mode="separate")
    assert len([c for c in calls(log, "aiecc") if "--get-xclbin" in c]) == 1
    assert [c for c in calls(log, "aiecc") if "--get-npu-insts" in c] == []
    assert image.elves == ("",)  # made per call
    entry = Path(image.xclbin).parent
    record = json.loads((entry / "image.xclbin.json").read_text())
    assert [k["rtp"] for k in record["kernels"]] == [["k"]]
    mlir = (entry / "link0.mlir").read_text()
    assert 'sym_name = "rtp_adder"' in mlir and "memref.load %rtp.adder" in mlir
    assert "read_scratchpad_parameter" not in mlir


def test_each_calls_stream_writes_its_value_into_the_runtime_parameter_word(tools, tmp_path):
    """The npu backend's per-call stream of AddK (k bound per call) is an
    instructions-only compile whose sequence writes that call's k."""
    from iron.core.capture import Graph
    from iron.dispatch import Runlist, plan_layout
    from iron.dispatch.backends.npu import NpuBackend

    toolchain, _ = tools(KEEPING_BODY.format(log=str(tmp_path / "calls.log")))
    g = Graph("bound")
    y = g(AddK(SIZE), g.input("x", (SIZE,), "int32"), k=g.scalar("pos"))
    runlist = Runlist.from_graph(g, inputs=["x"], outputs=[y.name], device=NPU1)
    layout, _, _ = plan_layout(runlist)
    image = ToolchainSim(toolchain).compile(runlist, layout, mode="separate")

    class ToolchainNpu(NpuBackend):
        def toolchain(self):
            return toolchain

    instructions = ToolchainNpu(Session())._streams(image)
    for k in (5, -2):
        instructions(0, {"k": k}, {})
    kept = sorted((tmp_path / "streams").iterdir(), key=lambda p: int(p.stem))
    texts = [p.read_text() for p in kept]
    assert len(texts) == 2
    for k, text in zip((5, -2), texts):
        assert f"%rtp.adder.0 = arith.constant {k} : i32" in text
        assert "aiex.npu.rtp_write(@rtp_adder, 0, %rtp.adder.0) : i32" in text


def test_a_runtime_shaped_step_at_n_values_is_one_link_and_n_streams(tools):
    """FLMGemm at three M in one image: its designs share a configuration,
    so one xclbin kernel (named by the configuration, its instance name
    under xclbinutil's 64 characters) and one link serve them, with an
    instructions-only compile per M."""
    toolchain, log = tools(XCLBIN_BODY)
    ms = (256, 512, 768)
    runlist, layout = _gemms(ms)
    image = ToolchainSim(toolchain).compile(runlist, layout, mode="separate")
    assert len({s.digest for p in image.programs for s in p.steps}) == len(ms)  # a design per M
    links = [c for c in calls(log, "aiecc") if "--get-xclbin" in c]
    streams = [c for c in calls(log, "aiecc") if "--get-npu-insts" in c]
    assert (len(links), len(streams)) == (1, len(ms))
    (named,) = ({a.split("=")[0]: a.split("=", 1)[1] for a in c if "=" in a} for c in links)
    assert named["--xclbin-kernel-name"].startswith("FLMGemm_")
    assert len(named["--xclbin-instance-name"]) < 64
    assert Path(image.xclbin).read_text().split() == [named["--xclbin-kernel-name"]]
    assert [Path(e).name for e in image.elves] == [f"program{i}.insts.bin" for i in range(len(ms))]
    # each stream writes its own M's words into the cores' buffers
    entry = Path(image.xclbin).parent
    modules = [(entry / f"program{i}.mlir").read_text() for i in range(len(ms))]
    assert all(f"aie.device(npu2) @{named['--xclbin-kernel-name']}" in m for m in modules)
    assert len(set(modules)) == len(ms) and all("aiex.npu.rtp_write(" in m for m in modules)


def _gemms(ms, fields=None):
    """A graph of FLMGemm steps at (K, N) = (512, 1024), one per M of `ms`
    (step i with `fields[i]` besides)."""
    from iron.core import bf16
    from iron.core.capture import Graph
    from iron.dispatch import Runlist, plan_layout
    from iron.ops.flm.gemm import FLMGemm

    npu2, K, N = Device.from_name("npu2"), 512, 1024
    packed = FLMGemm(M=256, K=K, N=N).resolve(npu2).pack_b(np.ones((K, N), np.float32))
    g = Graph("sweep")
    b = g.weight("b", packed)
    outs = [
        g(FLMGemm(M=m, K=K, N=N, **(fields or {}).get(i, {})), g.input(f"a{i}", (m, K), bf16), b)
        for i, m in enumerate(ms)
    ]
    inputs = [f"a{i}" for i in range(len(ms))]
    runlist = Runlist.from_graph(g, inputs=inputs, outputs=[o.name for o in outs], device=npu2)
    layout, _, _ = plan_layout(runlist)
    return runlist, layout


def test_an_operator_naming_two_configurations_alike_is_refused_at_link(tools, monkeypatch):
    from iron.ops.flm.gemm import FLMGemm

    toolchain, log = tools(XCLBIN_BODY)
    monkeypatch.setattr(FLMGemm, "configuration", lambda self: "one name for every image")
    runlist, layout = _gemms((256, 256), {1: {"tile_n": 64}})
    with pytest.raises(ValueError, match="makes another configuration; one xclbin kernel is one"):
        ToolchainSim(toolchain).compile(runlist, layout, mode="separate")
    assert [c for c in calls(log, "aiecc") if "--get-xclbin" in c] == []


def test_one_xclbin_kernel_with_two_core_constants_is_refused(tools):
    toolchain, log = tools(XCLBIN_BODY)
    seq = sequence(AddK(SIZE, k=1), AddK(SIZE, k=5))  # one design, k read by its core
    with pytest.raises(ValueError, match=r"AddK_\w+ is linked with constants \{'k': 1\}"):
        ToolchainSim(toolchain).compile(seq.runlist, seq.layout, mode="separate")
    assert [c for c in calls(log, "aiecc") if "--get-xclbin" in c] == []


def test_kernel_objects_are_shared_between_graphs_by_recipe(tools):
    toolchain, log = tools()
    backend = ToolchainSim(toolchain)
    backend.compile(sequence(AddOne(SIZE)).runlist, sequence(AddOne(SIZE)).layout)
    two = sequence(AddOne(SIZE), AddOne(SIZE, tile=512))
    backend.compile(two.runlist, two.layout)
    assert len(calls(log, "aiecc")) == 2
    assert len(calls(log, "clang++")) == 1  # one source, one set of flags: one object
    kinds = sorted(e.get("kind", e.get("backend")) for e in CompileCache().entries())
    assert kinds == ["kernel", "sim", "sim"]


def test_a_failing_aiecc_shows_its_message_and_leaves_no_entry(tools, private_cache):
    toolchain, _ = tools(FAILING_BODY)
    seq = sequence(AddOne(SIZE))
    with pytest.raises(ToolchainError, match=r"aiecc failed \(exit 3\)[\s\S]*out of locks"):
        ToolchainSim(toolchain).compile(seq.runlist, seq.layout)
    programs = [e for e in CompileCache().entries() if e.get("kind") != "kernel"]
    assert programs == []
    leftovers = [p for p in Path(private_cache).rglob("*") if p.name.startswith((".aiecc", "."))]
    assert [p for p in leftovers if p.is_dir()] == []


@pytest.mark.toolchain
def test_the_real_toolchain_builds_an_xclbin_chain(private_cache):
    seq = sequence(AddOne(SIZE), AddK(SIZE), AddOne(SIZE))
    image = ToolchainSim(find_toolchain()).compile(seq.runlist, seq.layout, mode="separate")
    assert Path(image.xclbin).stat().st_size > 0
    assert all(Path(stream).stat().st_size > 0 for stream in image.elves)


@pytest.mark.toolchain
def test_the_real_toolchain_builds_a_fused_program(private_cache):
    seq = sequence(AddOne(SIZE), AddOne(SIZE))
    image = ToolchainSim(find_toolchain()).compile(seq.runlist, seq.layout)
    (elf,) = image.elves
    assert Path(elf).stat().st_size > 0


def test_a_step_without_a_design_cannot_go_to_aiecc(tools):
    toolchain, log = tools()
    seq = sequence(AddOne(SIZE), Twice(SIZE))
    with pytest.raises(ValueError, match=r"1 of 2 steps ran designs.*aiecc compiles designs only"):
        ToolchainSim(toolchain).compile(seq.runlist, seq.layout)
    assert calls(log, "aiecc") == []


def test_the_scratchpad_layout_follows_aiecc_params_txt(tmp_path):
    (tmp_path / "program0.params.txt").write_text("2\nw0 3 i32 core\nw1 0 i32 addr\n")
    assert scratchpad_layout(str(tmp_path / "program0.elf")) == {"w0": (3, 2), "w1": (0, 0)}
    assert scratchpad_layout(str(tmp_path / "program1.json")) == {}


def test_a_kernel_of_several_sources_is_built_as_iron_design_builds_it(tools, tmp_path):
    """npu1's GELU links mlir-aie's lookup tables: each source is compiled,
    then combined into the one object its link_with names."""
    from iron.ops.eltwise import GELU

    mlir_aie = tmp_path / "mlir_aie"
    for file in ("include/aie_kernels/aie2/gelu.cc", "aie_runtime_lib/AIE2/lut_based_ops.cpp"):
        (mlir_aie / file).parent.mkdir(parents=True, exist_ok=True)
        (mlir_aie / file).write_text(f"// {file}\n")
    toolchain, log = tools()
    _tool(toolchain.peano / "bin" / "ld.lld", log, PEANO_BODY)
    toolchain = Toolchain(toolchain.aiecc, toolchain.peano, mlir_aie)
    seq = OperatorSequence("gelu", [(GELU(size=2048, tile_size=1024), "x", "y")], ["x"], ["y"],
                           device=NPU1)  # fmt: skip
    ToolchainSim(toolchain).compile(seq.runlist, seq.layout)
    # the design's other kernel (ours: the rounding mode set before mlir-aie's GELU) is its own object
    compiles = [c for c in calls(log, "clang++") if str(mlir_aie) in c[c.index("-c") + 1]]
    sources = [c[c.index("-c") + 1] for c in compiles]
    assert sources == [
        str(mlir_aie / "include/aie_kernels/aie2/gelu.cc"),
        str(mlir_aie / "aie_runtime_lib/AIE2/lut_based_ops.cpp"),
    ]
    assert all(f"-I{mlir_aie / 'aie_runtime_lib/AIE2'}" in c for c in compiles)
    (link,) = calls(log, "ld.lld")
    assert link[0] == "-r" and [Path(p).name for p in link[1:-2]] == [
        Path(c[c.index("-o") + 1]).name for c in compiles
    ]
    assert Path(link[-1]).name == "kernel.o"
