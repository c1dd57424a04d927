"""The aiecc and Peano command lines, toolchain discovery, and `build`:
orchestration is run against stand-in tools that check what they are given;
the real toolchain compiles add_one where it is installed."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

import iron.design
from iron.core import Device
from iron.design.aiecc import (
    ELF_KERNEL,
    XCLBIN_NAME_LIMIT,
    Toolchain,
    ToolchainError,
    aiecc_command,
    build,
    find_toolchain,
    instructions_command,
    kernel_source,
    peano_commands,
    xclbin_command,
)
from iron.design.examples import add_one, add_one_kernel, split_join
from iron.design.mlir import kernel_objects, to_mlir
from iron.design.model import Call, DesignError, aie_kernels, aie_runtime_lib, shipped

SHIPPED_ADD_ONE = Path(iron.design.__file__).parent / "kernels" / "add_one.cc"


def test_aiecc_command_asks_for_a_full_elf_with_dynamic_fifos(tmp_path):
    command = aiecc_command(tmp_path / "d.mlir", workdir=tmp_path, peano="/opt/peano")
    assert command[:2] == ["aiecc", str(tmp_path / "d.mlir")]
    for flag in (
        "--get-full-elf",
        "--full-elf-name=design.elf",
        "--dynamic-objFifos",
        "--peano=/opt/peano",
        f"--tmpdir={tmp_path}",
        f"--output-dir={tmp_path}",
    ):
        assert flag in command
    assert "--get-scratchpad-parameters" not in command
    assert "--get-input-with-addresses" not in command
    assert not any(flag.startswith("--peano") for flag in aiecc_command("d.mlir", workdir="w"))


@pytest.mark.parametrize(
    "features, flag",
    [
        ({"scratchpad": True}, "--get-scratchpad-parameters"),
        ({"traced": True}, "--get-input-with-addresses"),
    ],
)
def test_aiecc_command_asks_for_side_files_per_feature(features, flag):
    assert flag in aiecc_command("d.mlir", workdir="w", **features)


def test_aiecc_command_names_the_program_and_the_elf_and_ends_with_extra_flags():
    command = aiecc_command(
        "d.mlir", workdir="w", aiecc="/x/bin/aiecc", elf_name="k.elf", extra=("-v", "-j2")
    )
    assert command[0] == "/x/bin/aiecc"
    assert "--full-elf-name=k.elf" in command
    assert command[-2:] == ["-v", "-j2"]


@pytest.mark.parametrize("device_name, arch", [("npu1", "aie2"), ("npu2", "aie2p")])
def test_peano_compiles_each_kernel_object_once_for_the_device_arch(device_name, arch, tmp_path):
    design = split_join(Device.from_name(device_name), workers=4)
    commands = peano_commands(design, tmp_path, peano="/opt/peano", mlir_aie="/opt/mlir_aie")
    assert len(commands) == 1  # four workers, one kernel
    (command,) = commands
    assert command[0] == "/opt/peano/bin/clang++"
    assert f"--target={arch}-none-unknown-elf" in command
    assert {"-std=c++20", "-O2", "-I/opt/mlir_aie/include"} <= set(command)
    assert command[-4:] == ["-c", str(SHIPPED_ADD_ONE), "-o", str(tmp_path / "add_one_i32.o")]


def _with_kernel(design, **changes):
    """`design` (one worker) calling its kernel changed by `changes`."""
    kernel = attrs.evolve(add_one_kernel(1024), **changes)
    worker = design.workers[0]
    body = [attrs.evolve(op, kernel=kernel) if isinstance(op, Call) else op for op in worker.body]
    return attrs.evolve(design, workers=(attrs.evolve(worker, body=body),)), kernel


def test_kernel_flags_follow_the_include_dirs(npu1, tmp_path):
    design, _ = _with_kernel(add_one(npu1), flags=("-DLANES=16",))
    (command,) = peano_commands(design, tmp_path, peano="p")
    assert command.index("-DLANES=16") == command.index("-c") - 1
    assert not any(flag.startswith("-I") for flag in command)


def test_aie_kernels_sources_resolve_in_the_install_per_arch(npu1, npu2, tmp_path):
    install = tmp_path / "mlir_aie"
    (install / "include" / "aie_kernels" / "aie2p").mkdir(parents=True)
    (install / "include" / "aie_kernels" / "aie2p" / "add.cc").write_text("// add")
    design, kernel = _with_kernel(add_one(npu2), source=aie_kernels("{arch}/add.cc"))
    expected = install / "include" / "aie_kernels" / "aie2p" / "add.cc"
    assert kernel_source(design, kernel, install) == expected
    (command,) = peano_commands(design, tmp_path, peano="p", mlir_aie=install)
    assert str(expected) in command
    on_npu1, kernel = _with_kernel(add_one(npu1), source=aie_kernels("{arch}/add.cc"))
    with pytest.raises(
        ToolchainError, match=r"kernel add_one_i32: no aie2/add\.cc in this mlir-aie"
    ):
        kernel_source(on_npu1, kernel, install)
    with pytest.raises(ToolchainError, match=r"aie2/add\.cc is in mlir-aie\'s aie_kernels, and no"):
        kernel_source(on_npu1, kernel, None)


def test_shipped_sources_that_do_not_exist_are_refused_by_name(npu1):
    design, kernel = _with_kernel(add_one(npu1), source=shipped("iron.design", "kernels/nope.cc"))
    with pytest.raises(
        DesignError, match=r"design add_one: kernel add_one_i32: package iron\.design ships no"
    ):
        kernel_source(design, kernel)
    design, kernel = _with_kernel(add_one(npu1), source=shipped("iron.nowhere", "k.cc"))
    with pytest.raises(DesignError, match=r"its source package iron\.nowhere is not installed"):
        kernel_source(design, kernel)


# ---- finding the tools -------------------------------------------------------------------


def _executable(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{text}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_toolchain_is_found_from_arguments_and_from_the_environment(tmp_path, monkeypatch):
    install, peano = tmp_path / "mlir_aie", tmp_path / "llvm-aie"
    aiecc = _executable(install / "bin" / "aiecc")
    _executable(peano / "bin" / "clang++")
    assert find_toolchain(mlir_aie=install, peano=peano) == Toolchain(aiecc, peano, install)
    monkeypatch.setenv("MLIR_AIE_INSTALL_DIR", str(install))
    monkeypatch.setenv("PEANO_INSTALL_DIR", str(peano))
    assert find_toolchain() == Toolchain(aiecc, peano, install)


def test_aiecc_is_found_on_path(tmp_path, monkeypatch):
    aiecc = _executable(tmp_path / "bin" / "aiecc")
    _executable(tmp_path / "peano" / "bin" / "clang++")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    found = find_toolchain(mlir_aie=tmp_path / "absent", peano=tmp_path / "peano")
    assert found == Toolchain(aiecc, tmp_path / "peano", None)


def test_a_missing_toolchain_is_reported_tool_by_tool(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError) as error:
        find_toolchain(mlir_aie=tmp_path / "no_mlir_aie", peano=tmp_path / "no_peano")
    message = str(error.value)
    assert "missing aiecc (not on PATH)" in message
    assert f"Peano (no bin/clang++ in {tmp_path / 'no_peano'})" in message
    assert f"the mlir-aie install ({tmp_path / 'no_mlir_aie'})" in message
    assert "Xilinx/mlir-aie releases" in message


def test_the_compile_modules_import_no_toolchain():
    code = "import sys, iron.design.aiecc; print(sorted(m for m in sys.modules if m.split('.')[0] in ('aie', 'pyxrt')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- build, with stand-in tools ----------------------------------------------------------

CLANG = """
import os, sys
argv = sys.argv[1:]
if os.environ.get("FAIL_PEANO"):
    sys.exit("add_one.cc:1: error: peano says no")
open(argv[argv.index("-o") + 1], "wb").write(b"object")
"""

# fails unless every link_with object is where aiecc looks first (its working directory)
AIECC = """
import os, re, sys
argv = sys.argv[1:]
options = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
for name in re.findall(r'link_with = "([^"]+)"', open(argv[0]).read()):
    if not os.path.isfile(name):
        sys.exit(f"error: cannot find {name}")
if os.environ.get("FAIL_AIECC"):
    sys.exit("error: 'aie.objectfifo' op failed to verify")
out = options["output-dir"]
if not os.environ.get("NO_ELF"):
    open(os.path.join(out, options["full-elf-name"]), "wb").write(b"\\x7fELF")
if "--get-scratchpad-parameters" in argv:
    open(os.path.join(out, "params.txt"), "w").write("0\\n")
if "--get-input-with-addresses" in argv:
    open(os.path.join(out, "input_with_addresses.mlir"), "w").write("module {}\\n")
"""


@pytest.fixture
def stand_ins(tmp_path) -> Toolchain:
    tools = tmp_path / "tools"
    aiecc = _executable(tools / "bin" / "aiecc", AIECC)
    _executable(tools / "peano" / "bin" / "clang++", CLANG)
    return Toolchain(aiecc, tools / "peano", None)


def test_compile_builds_the_objects_then_the_elf(stand_ins, npu2, tmp_path):
    design = add_one(npu2)
    elf = build(design, tmp_path / "out", toolchain=stand_ins)
    assert elf == tmp_path / "out" / "design.elf" and elf.read_bytes() == b"\x7fELF"
    assert sorted(os.listdir(tmp_path / "out")) == ["design.elf", "design.mlir"]
    assert (tmp_path / "out" / "design.mlir").read_text() == to_mlir(design)
    assert ELF_KERNEL == "main:sequence"


def test_compile_keeps_the_side_files_a_design_needs(stand_ins, npu2, tmp_path):
    design = attrs.evolve(add_one(npu2), params=("lines",))
    build(design, tmp_path / "out", toolchain=stand_ins, traced=True, elf_name="k.elf")
    assert sorted(os.listdir(tmp_path / "out")) == [
        "design.mlir", "input_with_addresses.mlir", "k.elf", "params.txt",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "variable, message",
    [
        ("FAIL_PEANO", r"(?s)design add_one: Peano failed \(exit 1\).*peano says no"),
        ("FAIL_AIECC", r"(?s)design add_one: aiecc failed \(exit 1\).*failed to verify"),
        ("NO_ELF", "design add_one: aiecc succeeded but wrote no design.elf"),
    ],
)
def test_a_failing_tool_leaves_nothing_behind(
    variable, message, stand_ins, npu1, tmp_path, monkeypatch
):
    monkeypatch.setenv(variable, "1")
    with pytest.raises(ToolchainError, match=message):
        build(add_one(npu1), tmp_path / "out", toolchain=stand_ins)
    assert os.listdir(tmp_path / "out") == []


def test_a_design_that_cannot_be_emitted_creates_no_directory(stand_ins, npu1, tmp_path):
    bad = attrs.evolve(add_one(npu1), device=attrs.evolve(npu1, name="npu9"))
    with pytest.raises(DesignError, match=r"no aie\.device for npu9"):
        build(bad, tmp_path / "out", toolchain=stand_ins)
    assert not (tmp_path / "out").exists()


# ---- the real toolchain ------------------------------------------------------------------


@pytest.mark.toolchain
@pytest.mark.parametrize("device_name", ["npu1", "npu2"])
def test_add_one_compiles_to_a_full_elf(device_name, tmp_path):
    try:
        tools = find_toolchain()
    except ToolchainError as missing:
        pytest.skip(str(missing))
    elf = build(add_one(Device.from_name(device_name)), tmp_path, toolchain=tools)
    assert elf.read_bytes()[:4] == b"\x7fELF"


# ---- kernels of more than one source -------------------------------------------------------


def _install(root: Path, files) -> Path:
    for file in files:
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text("// source\n")
    return root


LUT_FILES = ("include/aie_kernels/aie2/tanh.cc", "aie_runtime_lib/AIE2/lut_based_ops.cpp")


def _lut_kernel_design(device, *, lut="{ARCH}/lut_based_ops.cpp", defines=("LUT_SEGMENTS=32",)):
    source = aie_kernels(
        "{arch}/tanh.cc",
        extra_sources=[aie_runtime_lib(lut)],
        include_dirs=[aie_runtime_lib("{ARCH}")],
        defines=defines,
    )
    return _with_kernel(add_one(device), source=source, flags=("-DLANES=16",))


def test_extra_sources_compile_each_then_combine_into_the_one_object(npu1, tmp_path):
    install = _install(tmp_path / "mlir_aie", LUT_FILES)
    design, _ = _lut_kernel_design(npu1)
    work = tmp_path / "work"
    commands = peano_commands(design, work, peano="/opt/peano", mlir_aie=install)
    kernel_cc = install / "include" / "aie_kernels" / "aie2" / "tanh.cc"
    lut_cpp = install / "aie_runtime_lib" / "AIE2" / "lut_based_ops.cpp"
    parts = [work / "add_one_i32.0.tanh.o", work / "add_one_i32.1.lut_based_ops.o"]
    assert len(commands) == 3
    for command, source, part in zip(commands, (kernel_cc, lut_cpp), parts):
        assert command[0] == "/opt/peano/bin/clang++"
        assert "--target=aie2-none-unknown-elf" in command
        assert f"-I{install / 'include'}" in command
        assert f"-I{install / 'aie_runtime_lib' / 'AIE2'}" in command
        assert command[-5:] == ["-DLANES=16", "-c", str(source), "-o", str(part)]
        assert "-DLUT_SEGMENTS=32" in command
    assert commands[2] == [
        "/opt/peano/bin/ld.lld",
        "-r",
        *map(str, parts),
        "-o",
        str(work / "add_one_i32.o"),
    ]
    # the MLIR still links the one object
    assert 'link_with = "add_one_i32.o"' in to_mlir(design)


def test_extra_sources_resolve_per_arch_and_missing_ones_are_named(npu1, npu2, tmp_path):
    install = _install(tmp_path / "mlir_aie", LUT_FILES)
    on_npu2, _ = _lut_kernel_design(npu2)
    with pytest.raises(
        ToolchainError,
        match=r"kernel add_one_i32: no AIE2P in this mlir-aie install's aie_runtime_lib",
    ):
        peano_commands(on_npu2, tmp_path, peano="p", mlir_aie=install)
    missing, _ = _lut_kernel_design(npu1, lut="{ARCH}/exp_lut.cpp")
    with pytest.raises(
        ToolchainError, match=r"no AIE2/exp_lut\.cpp in this mlir-aie install's aie_runtime_lib"
    ):
        peano_commands(missing, tmp_path, peano="p", mlir_aie=install)
    with pytest.raises(
        ToolchainError, match=r"its include dir AIE2 is in mlir-aie's aie_runtime_lib, and no"
    ):
        peano_commands(_lut_kernel_design(npu1)[0], tmp_path, peano="p")


def test_what_an_object_is_built_from_is_part_of_the_design(npu1, tmp_path):
    design, kernel = _lut_kernel_design(npu1)
    other_lut, other = _lut_kernel_design(npu1, lut="{ARCH}/other_lut.cpp")
    other_define, _ = _lut_kernel_design(npu1, defines=("LUT_SEGMENTS=64",))
    one_source, _ = _with_kernel(add_one(npu1), source=aie_kernels("{arch}/tanh.cc"))
    digests = {d.digest() for d in (design, other_lut, other_define, one_source)}
    assert len(digests) == 4
    assert design.digest() == _lut_kernel_design(npu1)[0].digest()
    install = _install(tmp_path / "mlir_aie", (*LUT_FILES, "aie_runtime_lib/AIE2/other_lut.cpp"))
    first = peano_commands(design, tmp_path, peano="p", mlir_aie=install)
    second = peano_commands(other_lut, tmp_path, peano="p", mlir_aie=install)
    assert first[1] != second[1] and first[0] == second[0]
    # kernels of one main file but different extras never share an object
    worker = design.workers[0]
    renamed = attrs.evolve(other, symbol="other_i32")
    both = attrs.evolve(worker, body=(*worker.body, Call(renamed, worker.calls()[0].args)))
    objects = kernel_objects(attrs.evolve(design, workers=(both,)))
    assert objects == {kernel: "add_one_i32.o", renamed: "other_i32.o"}


def test_malformed_extras_are_refused_by_name():
    with pytest.raises(
        DesignError, match=r"kernel source k\.cc: a define is NAME or NAME=VALUE \(no -D\)"
    ):
        shipped("iron.design", "k.cc", defines=["-DX=1"])
    with pytest.raises(
        DesignError, match=r"kernel source k\.cc: lut\.cpp is one file or directory"
    ):
        shipped(
            "iron.design", "k.cc", extra_sources=[shipped("iron.design", "lut.cpp", defines=["X"])]
        )
    with pytest.raises(
        DesignError, match=r"extra sources and include dirs are KernelSource values"
    ):
        aie_kernels("k.cc", include_dirs=["/usr/include"])
    assert aie_runtime_lib("{ARCH}/lut.cpp").path_for("aie2p") == "AIE2P/lut.cpp"


LINKER = """
import os, sys
argv = sys.argv[1:]
assert argv[0] == "-r", argv
inputs = argv[1 : argv.index("-o")]
if not all(os.path.isfile(i) for i in inputs):
    sys.exit(f"ld.lld: error: cannot open {inputs}")
open(argv[argv.index("-o") + 1], "wb").write(b"".join(open(i, "rb").read() for i in inputs))
"""


def test_build_combines_the_parts_before_aiecc_links_the_object(stand_ins, npu1, tmp_path):
    install = _install(tmp_path / "mlir_aie", LUT_FILES)
    _executable(stand_ins.peano / "bin" / "ld.lld", LINKER)
    design, _ = _lut_kernel_design(npu1)
    tools = attrs.evolve(stand_ins, mlir_aie=install)
    elf = build(design, tmp_path / "out", toolchain=tools)
    assert elf.read_bytes() == b"\x7fELF"  # aiecc found add_one_i32.o where it looks


# ---- the xclbin chain and instructions-only compiles --------------------------------


def test_the_xclbin_chain_link_is_aiecc_with_its_kernel_flags(tmp_path):
    first = xclbin_command("a.mlir", workdir=tmp_path, xclbin_name="chain.xclbin",
                           kernel_name="AddK_12345678", instance_name="abcdef_op0",
                           kernel_id=0x901, aiecc="aiecc", peano="/p")  # fmt: skip
    assert first == [
        "aiecc", "a.mlir", "--get-xclbin", "--xclbin-name=chain.xclbin",
        "--xclbin-kernel-name=AddK_12345678", "--xclbin-instance-name=abcdef_op0",
        "--xclbin-kernel-id=0x901", "--dynamic-objFifos", "--peano=/p",
        f"--tmpdir={tmp_path}", f"--output-dir={tmp_path}",
    ]  # fmt: skip
    second = xclbin_command("b.mlir", workdir=tmp_path, xclbin_name="chain.xclbin",
                            kernel_name="AddOne_1", instance_name="abcdef_op1", kernel_id=0x902,
                            xclbin_input="prev.xclbin")  # fmt: skip
    assert "--xclbin-input=prev.xclbin" in second and "--xclbin-kernel-id=0x902" in second
    assert not any(a.startswith("--peano") for a in second)
    with pytest.raises(ValueError, match=r"instance name .* 1 to 63 characters"):
        xclbin_command("a.mlir", workdir=tmp_path, xclbin_name="x", kernel_name="k",
                       instance_name="i" * XCLBIN_NAME_LIMIT, kernel_id=0x901)  # fmt: skip


def test_an_instructions_only_compile_needs_no_peano_and_no_xclbin(tmp_path):
    command = instructions_command("s.mlir", workdir=tmp_path, insts_name="stream.bin")
    assert command == [
        "aiecc", "s.mlir", "--get-npu-insts", "--npu-insts-name=stream.bin",
        "--dynamic-objFifos", f"--tmpdir={tmp_path}", f"--output-dir={tmp_path}",
    ]  # fmt: skip
