"""How the activation kernels' objects are built: on aie2 each links
mlir-aie's tanh tables (``lut_based_ops.cpp``) into its one object; on aie2p
the kernel file alone. The command lines need no toolchain; the build does."""

import pytest

from iron.core import Device
from iron.design import ToolchainError, build, design_of, find_toolchain, peano_commands, to_mlir
from iron.ops.eltwise import GELU, Sigmoid, SiLU, Tanh

ACTIVATIONS = [(Tanh, "tanh"), (Sigmoid, "sigmoid"), (SiLU, "silu"), (GELU, "gelu")]


def _install(root, arch: str):
    for file in [f"include/aie_kernels/{arch}/{name}.cc" for _, name in ACTIVATIONS] + [
        "aie_runtime_lib/AIE2/lut_based_ops.cpp"
    ]:
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text("// source\n")
    return root


@pytest.mark.parametrize("cls, file", ACTIVATIONS)
def test_aie2_activation_objects_carry_the_tanh_tables(cls, file, tmp_path):
    install = _install(tmp_path / "mlir_aie", "aie2")
    design = design_of(cls(size=4096, tile_size=1024).resolve(Device.from_name("npu1")))
    (kernel,) = design.kernels
    work = tmp_path / "work"
    *compiles, link = peano_commands(design, work, peano="/peano", mlir_aie=install)
    sources = [
        install / "include/aie_kernels/aie2" / f"{file}.cc",
        install / "aie_runtime_lib/AIE2/lut_based_ops.cpp",
    ]
    parts = [work / f"{kernel.symbol}.0.{file}.o", work / f"{kernel.symbol}.1.lut_based_ops.o"]
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


@pytest.mark.parametrize("cls, file", ACTIVATIONS)
def test_aie2p_activation_objects_are_the_kernel_file_alone(cls, file, tmp_path):
    install = _install(tmp_path / "mlir_aie", "aie2p")
    design = design_of(cls(size=4096, tile_size=1024).resolve(Device.from_name("npu2")))
    (command,) = peano_commands(design, tmp_path, peano="/peano", mlir_aie=install)
    assert command[-4] == "-c" and command[-3] == str(
        install / "include/aie_kernels/aie2p" / f"{file}.cc"
    )
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
