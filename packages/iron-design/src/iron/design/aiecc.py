"""Compiling a design where mlir-aie and Peano are installed: the command
lines (`aiecc_command`, `peano_commands`), finding the tools
(`find_toolchain`), and `build`, which runs them into a full ELF.

Nothing here imports mlir-aie: its install is found on disk and its tools
run as programs, so this module imports (and its command lines can be
tested) anywhere. The tools are looked for as mlir-aie's own
``aie.utils.config`` looks for them: aiecc in the install's ``bin`` then on
PATH; Peano in ``PEANO_INSTALL_DIR``, then the ``llvm-aie`` wheel, then
beside the install; the install in ``MLIR_AIE_INSTALL_DIR`` or where the
``mlir_aie`` wheel put the ``aie`` package.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

import attrs

from iron.design.mlir import DEVICE_SYMBOL, SEQUENCE_SYMBOL, kernel_objects, to_mlir
from iron.design.model import Design, DesignError, Kernel, KernelSource

#: the full ELF's kernel, as pyxrt.ext.kernel names it
ELF_KERNEL = f"{DEVICE_SYMBOL}:{SEQUENCE_SYMBOL}"
#: what mlir-aie compiles kernels with; the define keeps stock aie_api from
#: including adf.h, which Peano does not ship
PEANO_FLAGS = ("-std=c++20", "-O2", "-DNDEBUG", "-D__AIE_API_AIE_ADF_HPP__")
HOW_TO_INSTALL = (
    "Install the mlir_aie and llvm-aie wheels from the Xilinx/mlir-aie releases (they are "
    "not on PyPI), or set MLIR_AIE_INSTALL_DIR and PEANO_INSTALL_DIR"
)


class ToolchainError(RuntimeError):
    """A tool is missing, or a tool failed (the message holds its output)."""


@attrs.frozen
class Toolchain:
    """Where the tools are: the `aiecc` program, the Peano install (its
    ``bin/clang++``) and the mlir-aie install, whose ``include`` holds
    ``aie_api`` and ``aie_kernels`` (None if only shipped kernels are built)."""

    aiecc: Path
    peano: Path
    mlir_aie: Path | None = None


def find_toolchain(*, mlir_aie=None, peano=None, aiecc=None) -> Toolchain:
    """The tools of this host (arguments win over discovery); raises
    `ToolchainError` naming each missing tool and where it was looked for."""
    roots = _mlir_aie_places(mlir_aie)
    root = next((p for p in roots if p.is_dir()), None)
    aieccs = _aiecc_places(aiecc, root)
    found_aiecc = next((p for p in aieccs if p.is_file()), None)
    peanos = _peano_places(peano, root)
    found_peano = next((p for p in peanos if (p / "bin" / "clang++").is_file()), None)
    missing = []
    if found_aiecc is None:
        missing.append(f"aiecc (not on PATH{''.join(f', not {p}' for p in aieccs)})")
    if found_peano is None:
        missing.append(f"Peano (no bin/clang++ in {', '.join(map(str, peanos))})")
    if missing:
        if root is None:
            tried = ", ".join(map(str, roots)) or "MLIR_AIE_INSTALL_DIR unset, no aie package"
            missing.append(f"the mlir-aie install ({tried})")
        raise ToolchainError(
            f"cannot compile designs here; missing {'; '.join(missing)}. {HOW_TO_INSTALL}"
        )
    return Toolchain(found_aiecc, found_peano, root)


def _mlir_aie_places(given) -> list[Path]:
    if given:
        return [Path(given)]
    places = [Path(p) for p in [os.environ.get("MLIR_AIE_INSTALL_DIR")] if p]
    spec = importlib.util.find_spec("aie")  # finds the package without running it
    if spec is not None and spec.origin:
        places.append(Path(spec.origin).parents[2])  # <install>/python/aie/__init__.py
    return places


def _aiecc_places(given, mlir_aie: Path | None) -> list[Path]:
    if given:
        return [Path(shutil.which(given) or given)]
    places = [mlir_aie / "bin" / "aiecc"] if mlir_aie else []
    return places + [Path(p) for p in [shutil.which("aiecc")] if p]


def _peano_places(given, mlir_aie: Path | None) -> list[Path]:
    if given:
        return [Path(given)]
    places = [Path(p) for p in [os.environ.get("PEANO_INSTALL_DIR")] if p]
    places.append(Path(sysconfig.get_path("platlib")) / "llvm-aie")
    return places + ([mlir_aie / "peano"] if mlir_aie else [])


# ---- command lines ---------------------------------------------------------------------


def aiecc_command(
    mlir_path,
    *,
    workdir,
    elf_name: str = "design.elf",
    aiecc="aiecc",
    peano=None,
    scratchpad: bool = False,
    traced: bool = False,
    extra: Sequence[str] = (),
) -> list[str]:
    """The aiecc command that compiles `mlir_path` to a full ELF
    `workdir`/`elf_name`, its intermediates in `workdir` too. `scratchpad`
    also writes ``params.txt`` (a design with parameters needs it to set
    them); `traced` writes ``input_with_addresses.mlir``, which trace
    parsing reads; `extra` flags go last."""
    command = [
        str(aiecc),
        str(mlir_path),
        "--get-full-elf",
        f"--full-elf-name={elf_name}",
        "--dynamic-objFifos",
    ]
    if peano is not None:
        command.append(f"--peano={peano}")
    command += [f"--tmpdir={workdir}", f"--output-dir={workdir}"]
    if scratchpad:
        command.append("--get-scratchpad-parameters")
    if traced:
        command.append("--get-input-with-addresses")
    return [*command, *extra]


#: xclbinutil refuses an instance name of 64 characters or more (the
#: original IRON keeps its names short with a 6-character hash for this)
XCLBIN_NAME_LIMIT = 64


def xclbin_command(
    mlir_path,
    *,
    workdir,
    xclbin_name: str,
    kernel_name: str,
    instance_name: str,
    kernel_id: int,
    xclbin_input=None,
    aiecc="aiecc",
    peano=None,
) -> list[str]:
    """The aiecc command that links `mlir_path`'s device into an xclbin
    `workdir`/`xclbin_name` as kernel `kernel_name` (instance
    `instance_name`, id `kernel_id`), adding it to the xclbin `xclbin_input`
    when given (an xclbin chain: one link per distinct design). Flags as
    mlir-aie's aiecc spells them at the pin (tools/aiecc/CommandLineOptions.h:
    ``xclbin-name``, ``xclbin-kernel-name``, ``xclbin-instance-name``,
    ``xclbin-kernel-id``, ``xclbin-input``)."""
    for what, name in (("kernel", kernel_name), ("instance", instance_name)):
        if not name or len(name) >= XCLBIN_NAME_LIMIT:
            raise ValueError(
                f"xclbin {what} name {name!r}: 1 to {XCLBIN_NAME_LIMIT - 1} characters "
                "(xclbinutil's limit)"
            )
    command = [
        str(aiecc),
        str(mlir_path),
        "--get-xclbin",
        f"--xclbin-name={xclbin_name}",
        f"--xclbin-kernel-name={kernel_name}",
        f"--xclbin-instance-name={instance_name}",
        f"--xclbin-kernel-id=0x{kernel_id:x}",
    ]
    if xclbin_input is not None:
        command.append(f"--xclbin-input={xclbin_input}")
    command.append("--dynamic-objFifos")
    if peano is not None:
        command.append(f"--peano={peano}")
    return [*command, f"--tmpdir={workdir}", f"--output-dir={workdir}"]


def instructions_command(mlir_path, *, workdir, insts_name: str, aiecc="aiecc") -> list[str]:
    """The aiecc command that compiles only `mlir_path`'s runtime sequence
    into an instruction stream `workdir`/`insts_name`, for a device an
    xclbin built elsewhere configures. No core is compiled (aiecc builds
    cores only for artifacts that embed them), so it needs no Peano."""
    return [
        str(aiecc),
        str(mlir_path),
        "--get-npu-insts",
        f"--npu-insts-name={insts_name}",
        "--dynamic-objFifos",
        f"--tmpdir={workdir}",
        f"--output-dir={workdir}",
    ]


def peano_commands(design: Design, workdir, *, peano, mlir_aie=None) -> list[list[str]]:
    """The Peano commands that build each kernel object of `design` (see
    `kernel_objects`) as ``workdir/<object>``, for the design's architecture
    (`kernel_commands` for each)."""
    built: dict[str, Kernel] = {}
    for kernel, name in kernel_objects(design).items():
        built.setdefault(name, kernel)
    return [
        command
        for name, kernel in built.items()
        for command in kernel_commands(
            design, kernel, Path(workdir) / name, peano=peano, mlir_aie=mlir_aie
        )
    ]


def kernel_commands(
    design: Design, kernel: Kernel, output, *, peano, mlir_aie=None
) -> list[list[str]]:
    """The Peano commands that build `kernel`'s object as `output`.

    A kernel of one source is one compile. One with extra sources compiles
    each (every source with the kernel's include dirs, defines and flags)
    into ``<object stem>.<n>.<source stem>.o``, then combines them with
    Peano's ``ld.lld -r`` into the one object its ``link_with`` names.
    mlir-aie's examples compile the same sources separately and archive
    them (``kernels.a``); a relocatable link keeps one object per kernel."""
    source, output = kernel.source, Path(output)
    options = [
        str(Path(peano) / "bin" / "clang++"),
        *PEANO_FLAGS,
        f"--target={design.device.arch}-none-unknown-elf",
        *([f"-I{Path(mlir_aie) / 'include'}"] if mlir_aie else []),
        *(
            f"-I{kernel_path(design, kernel, d, mlir_aie, directory=True)}"
            for d in source.include_dirs
        ),
        *(f"-D{define}" for define in source.defines),
        *kernel.flags,
    ]
    if not source.extra_sources:
        return [[*options, "-c", str(kernel_source(design, kernel, mlir_aie)), "-o", str(output)]]
    commands, parts = [], []
    for index, part in enumerate(source.parts):
        path = kernel_path(design, kernel, part, mlir_aie)
        parts.append(output.parent / f"{output.stem}.{index}.{path.stem}.o")
        commands.append([*options, "-c", str(path), "-o", str(parts[-1])])
    commands.append(
        [str(Path(peano) / "bin" / "ld.lld"), "-r", *map(str, parts), "-o", str(output)]
    )
    return commands


def kernel_inputs(design: Design, kernel: Kernel, mlir_aie=None) -> list[Path]:
    """Every file `kernel`'s object is compiled from, the main source first."""
    return [kernel_path(design, kernel, part, mlir_aie) for part in kernel.source.parts]


def kernel_source(design: Design, kernel: Kernel, mlir_aie=None) -> Path:
    """The main C++ file of `kernel` for the design's architecture: shipped
    in a Python package, or in the mlir-aie install (``include/aie_kernels``
    or ``aie_runtime_lib``)."""
    return kernel_path(design, kernel, kernel.source, mlir_aie)


def kernel_path(
    design: Design, kernel: Kernel, source: KernelSource, mlir_aie=None, *, directory=False
) -> Path:
    """Where `source` (one of `kernel`'s files, or with `directory` one of
    its include dirs) is, for the design's architecture."""
    file = source.path_for(design.device.arch)
    where = f"design {design.name}: kernel {kernel.symbol}"
    exists = Path.is_dir if directory else Path.is_file
    if source.package is None:
        tree = source.tree.rsplit("/", 1)[-1]
        if mlir_aie is None:
            raise ToolchainError(
                f"{where}: its {'include dir' if directory else 'source'} {file} is in "
                f"mlir-aie's {tree}, and no mlir-aie install was found. {HOW_TO_INSTALL}"
            )
        path = Path(mlir_aie) / source.tree / file
        if not exists(path):
            raise ToolchainError(f"{where}: no {file} in this mlir-aie install's {tree} ({path})")
        return path
    try:
        path = Path(str(importlib.resources.files(source.package) / file))
    except ModuleNotFoundError:
        raise DesignError(
            f"{where}: its source package {source.package} is not installed"
        ) from None
    if not exists(path):
        raise DesignError(f"{where}: package {source.package} ships no {file}")
    return path


# ---- compiling ------------------------------------------------------------------------


def build(
    design: Design,
    workdir,
    *,
    toolchain: Toolchain | None = None,
    elf_name: str = "design.elf",
    traced: bool = False,
    extra: Sequence[str] = (),
) -> Path:
    """Build `design` into `workdir`/`elf_name` (a full ELF whose kernel is
    `ELF_KERNEL`) and return its path. Beside it: the MLIR (``design.mlir``),
    and ``params.txt`` / ``input_with_addresses.mlir`` when the design has
    parameters / `traced`. The tools work in a scratch directory; only a
    complete result is moved into `workdir`, the ELF last, so a failure
    (`ToolchainError`, with the failing tool's output) leaves nothing there."""
    tools = toolchain or find_toolchain()
    text = to_mlir(design)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".compiling-", dir=workdir))
    try:
        mlir = stage / "design.mlir"
        mlir.write_text(text)
        for command in peano_commands(design, stage, peano=tools.peano, mlir_aie=tools.mlir_aie):
            _run(design, "Peano", command, stage)
        command = aiecc_command(
            mlir,
            workdir=stage,
            elf_name=elf_name,
            aiecc=tools.aiecc,
            peano=tools.peano,
            scratchpad=bool(design.params),
            traced=traced,
            extra=extra,
        )
        _run(design, "aiecc", command, stage)
        outputs = ["design.mlir"]
        outputs += ["params.txt"] if design.params else []
        outputs += ["input_with_addresses.mlir"] if traced else []
        outputs.append(elf_name)
        absent = [name for name in outputs if not (stage / name).is_file()]
        if absent:
            raise ToolchainError(
                f"design {design.name}: aiecc succeeded but wrote no {', '.join(absent)}: "
                f"{shlex.join(command)}"
            )
        for name in outputs:
            os.replace(stage / name, workdir / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return workdir / elf_name


def _run(design: Design, tool: str, command: list[str], cwd: Path) -> None:
    # relative link_with objects resolve against aiecc's working directory first
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ToolchainError(
            f"design {design.name}: {tool} failed (exit {result.returncode}): "
            f"{shlex.join(command)}\n{result.stderr or result.stdout}"
        )
