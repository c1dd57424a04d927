"""How the activation kernels' objects are built: on aie2 each links
mlir-aie's tanh tables (``lut_based_ops.cpp``) into its one object beside its
file (mlir-aie's silu.cc or gelu.cc for a 1024-element line, else ours); on
aie2p the kernel file alone. The command lines need no toolchain; the build
does."""

from importlib.resources import files
from pathlib import Path

import pytest

from iron.core import Device
from iron.design import ToolchainError, build, design_of, find_toolchain, peano_commands, to_mlir
from iron.ops.eltwise import GELU, Sigmoid, SiLU, Tanh

KERNELS = Path(str(files("iron.ops.eltwise") / "kernels"))  # as installed
#: (operator, line, the main source on each architecture: mlir-aie's file or ours)
ACTIVATIONS = [
    (Tanh, 1024, None),
    (Sigmoid, 1024, None),
    (SiLU, 1024, "silu.cc"),
    (GELU, 1024, "gelu.cc"),
    (SiLU, 256, None),
    (GELU, 512, None),
]


def _install(root, arch: str):
    for file in [f"include/aie_kernels/{arch}/{name}" for name in ("silu.cc", "gelu.cc")] + [
        "aie_runtime_lib/AIE2/lut_based_ops.cpp"
    ]:
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text("// source\n")
    return root


def _main_source(install, arch, pinned):
    if pinned is None:
        return KERNELS / arch / "activation.cc"
    return install / "include/aie_kernels" / arch / pinned


@pytest.mark.parametrize(("cls", "line", "pinned"), ACTIVATIONS)
def test_aie2_activation_objects_carry_the_tanh_tables(cls, line, pinned, tmp_path):
    install = _install(tmp_path / "mlir_aie", "aie2")
    design = design_of(cls(size=4096, tile_size=line).resolve(Device.from_name("npu1")))
    (kernel,) = [k for k in design.kernels if k.symbol != "iron_set_rounding_conv_even"]
    work = tmp_path / "work"
    commands = peano_commands(design, work, peano="/peano", mlir_aie=install)
    main = _main_source(install, "aie2", pinned)
    *compiles, link = [c for c in commands if any(str(main) in p or kernel.symbol in p for p in c)]
    sources = [main, install / "aie_runtime_lib/AIE2/lut_based_ops.cpp"]
    parts = [
        work / f"{kernel.symbol}.0.{main.stem}.o",
        work / f"{kernel.symbol}.1.lut_based_ops.o",
    ]
    for command, source, part in zip(compiles, sources, parts, strict=True):
        assert command[0] == "/peano/bin/clang++"
        assert "--target=aie2-none-unknown-elf" in command
        assert {f"-I{install / 'include'}", f"-I{install / 'aie_runtime_lib/AIE2'}"} <= set(command)
        assert command[-4:] == ["-c", str(source), "-o", str(part)]
    assert link == [
        "/peano/bin/ld.lld",
        "-r",
        *map(str, parts),
        "-o",
        str(work / f"{kernel.symbol}.o"),
    ]
    assert f'link_with = "{kernel.symbol}.o"' in to_mlir(design)


@pytest.mark.parametrize(("cls", "line", "pinned"), ACTIVATIONS)
def test_aie2p_activation_objects_are_the_kernel_file_alone(cls, line, pinned, tmp_path):
    install = _install(tmp_path / "mlir_aie", "aie2p")
    design = design_of(cls(size=4096, tile_size=line).resolve(Device.from_name("npu2")))
    (kernel,) = [k for k in design.kernels if k.symbol != "iron_set_rounding_conv_even"]
    main = _main_source(install, "aie2p", pinned)
    (command,) = [
        c for c in peano_commands(design, tmp_path, peano="/peano", mlir_aie=install)
        if c[-3] == str(main)
    ]  # fmt: skip
    assert command[-1] == str(tmp_path / f"{kernel.symbol}.o")
    assert not any("aie_runtime_lib" in part for part in command)


@pytest.mark.toolchain
@pytest.mark.parametrize("device_name", ["npu1", "npu2"])
def test_gelu_builds_to_a_full_elf(device_name, tmp_path):
    try:
        tools = find_toolchain()
    except ToolchainError as missing:
        pytest.skip(str(missing))
    design = design_of(GELU(size=4096, tile_size=1024).resolve(Device.from_name(device_name)))
    assert build(design, tmp_path, toolchain=tools).read_bytes()[:4] == b"\x7fELF"
