"""The compile pipeline: an image's data artifacts, in the compile cache.

Per compiled version, one entry keyed by the image's identity (design
digests, runlist, layout, trace size, backend, mode, flags; see
`identity.key_text`) holding:

- ``image.json``: the steps as data (operator identities and placements);
- ``program<i>.json``: each device program, which the simulated XRT loads;
- ``program<i>.mlir``: its fused MLIR, when every step has a design;
- ``designs.json``: each design's canonical text by digest;
- ``operators.json``: the operator behind each design (by digest) and host
  model (by key), as data (`operator_records`): what the simulated device
  rebuilds them from in a process that did not compile the program;
- ``recipes.json``: how each kernel object is built (source digest, flags,
  include directories, target);
- with a toolchain (aiecc and Peano): ``program<i>.elf`` (and
  ``program<i>.params.txt``) from aiecc, linked with kernel objects that are
  cache entries of their own, keyed by recipe, so designs and graphs share them.

A failing tool raises `ToolchainError` with its own output, and the entry
is never made.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from iron.core import files
from iron.design import Design, ToolchainError, aiecc_command
from iron.design.aiecc import PEANO_FLAGS, Toolchain, kernel_commands, kernel_inputs
from iron.design.mlir import kernel_objects
from iron.design.model import canonical
from iron.dispatch.cache import CompileCache, file_sha256
from iron.dispatch.fusion import object_names, program_mlir
from iron.dispatch.identity import digest
from iron.dispatch.image import Image
from iron.dispatch.program import FusionError

#: aiecc flags every fused program takes beyond `aiecc_command`'s: expand
#: the children's PDI loads inline, as IRON's fused full ELF does
FUSED_FLAGS = ("--expand-load-pdis",)


def image_summary(image: Image) -> str:
    """The image's steps as JSON data (what a hit is checked against)."""
    steps = [
        {
            "operator": step.op.identity_text(),
            "args": [[p.arena, p.offset, p.nbytes] for p in step.args],
            "words": [list(w) for w in step.words],
            "constants": [list(c) for c in step.constants],
        }
        for step in image.steps
    ]
    data = {"name": image.name, "backend": image.backend, "mode": image.mode,
            "device": image.device, "sizes": image.sizes, "trace_size": image.trace_size,
            "parameters": [str(p) for p in image.parameters], "steps": steps}  # fmt: skip
    return json.dumps(data, separators=(",", ":"))


#: an entry's operator records (see `operator_records`)
OPERATORS = "operators.json"


def operator_records(image: Image) -> dict[str, dict]:
    """Design digest or host key -> the operator that makes it: its class
    (``module:QualName``, as a plugin registers it), parameters
    (`Operator.to_data`) and device (name and columns)."""
    records = {}
    for program in image.programs:
        for step in program.steps:
            name = step.digest if step.device is not None else step.host
            if name not in records:
                op = image.steps[step.index].op
                cls = type(op)
                records[name] = {
                    "class": f"{cls.__module__}:{cls.__qualname__}",
                    "params": op.to_data(),
                    "device": [op.device.name, op.device.columns] if op.device else None,
                }
    return records


def recipes(image: Image, toolchain: Toolchain | None) -> dict[str, dict]:
    """Object name (as the fused MLIR links it) -> its recipe, over every
    design of the image."""
    names = object_names(image.designs)
    found: dict[str, dict] = {}
    for key, design in image.designs.items():
        for kernel, name in kernel_objects(design).items():
            found[names[key, name]] = _recipe(design, kernel, toolchain)
    return found


#: where a recipe's commands put the object; the cache entry's folder at build time
OUTPUT_DIR = "{entry}"


def _recipe(design: Design, kernel, toolchain: Toolchain | None) -> dict:
    mlir_aie = toolchain.mlir_aie if toolchain else None
    try:
        inputs = kernel_inputs(design, kernel, mlir_aie)
    except ToolchainError:  # an mlir-aie kernel with no install here: its names are the recipe
        inputs = None
    source, arch = kernel.source, design.device.arch
    return {
        "source": source.path_for(arch),
        "package": source.package,
        "extra_sources": [part.path_for(arch) for part in source.extra_sources],
        "sources_sha256": [file_sha256(path) for path in inputs] if inputs else None,
        "include_dirs": [d.path_for(arch) for d in source.include_dirs],
        "defines": list(source.defines),
        "flags": [*PEANO_FLAGS, *kernel.flags],
        "target": f"{arch}-none-unknown-elf",
        "includes": [str(Path(mlir_aie) / "include")] if mlir_aie else [],
        "path": str(inputs[0]) if inputs else None,
        # iron.design's own build of the object, with this machine's paths
        "commands": kernel_commands(
            design, kernel, Path(OUTPUT_DIR) / "kernel.o", peano=toolchain.peano, mlir_aie=mlir_aie
        )
        if toolchain and inputs
        else None,
    }


def recipe_key(recipe: dict) -> str:
    """Source bytes, flags, defines, target and include directories: not
    where the files or the tools are."""
    keyed = {k: v for k, v in recipe.items() if k not in ("path", "source", "package", "commands")}
    return digest(json.dumps(keyed, sort_keys=True))


def write_artifacts(
    image: Image, staging: Path, *, toolchain: Toolchain | None, cache: CompileCache
) -> dict:
    """Everything an entry holds, written into `staging`; manifest fields back."""
    (staging / "image.json").write_text(image_summary(image))
    designs = {d: {"name": x.name, "device": x.device.key, "text": canonical(x)}
               for d, x in image.designs.items()}  # fmt: skip
    (staging / "designs.json").write_text(json.dumps(designs, indent=1))
    (staging / OPERATORS).write_text(json.dumps(operator_records(image), indent=1, sort_keys=True))
    objects = recipes(image, toolchain)
    (staging / "recipes.json").write_text(json.dumps(objects, indent=1, sort_keys=True))
    emitted = 0
    for i, program in enumerate(image.programs):
        (staging / f"program{i}.json").write_text(program.to_json())
        # a runtime-shaped step's sequence and derived words come per call
        # (`iron.dispatch.streams`): no one fused module holds them
        if all(s.device is not None and not s.stream for s in program.steps):
            (staging / f"program{i}.mlir").write_text(program_mlir(program, image.designs))
            emitted += 1
    if toolchain is not None and image.programs:
        shaped = sorted({s.operator for p in image.programs for s in p.steps if s.stream})
        if shaped:
            raise FusionError(
                f"{image.name}: runtime-shaped steps ({', '.join(shaped)}) take an instruction "
                "stream per call, which only the xclbin packaging loads; a full ELF cannot"
            )
        if emitted < len(image.programs):
            raise FusionError(
                f"{image.name}: {image.design_summary()}; aiecc compiles designs only"
            )
        built = {
            name: kernel_object(recipe, name, toolchain, cache) for name, recipe in objects.items()
        }
        for i, program in enumerate(image.programs):
            _aiecc(staging, i, program, built, toolchain)
    return {"programs": len(image.programs), "mlir": emitted, "designs": len(designs),
            "toolchain": toolchain is not None}  # fmt: skip


def kernel_object(recipe: dict, name: str, toolchain: Toolchain, cache: CompileCache) -> Path:
    """The object built from `recipe` with Peano: a cache entry of its own."""
    if recipe["commands"] is None:
        raise ToolchainError(f"kernel object {name}: its source {recipe['source']} was not found")

    def build(staging: Path) -> dict:
        for command in recipe["commands"]:
            command = [part.replace(OUTPUT_DIR, str(staging)) for part in command]
            _run(f"kernel object {name}", Path(command[0]).name, command, staging)
        return {"recipe": {k: v for k, v in recipe.items() if k != "commands"}}

    entry, _ = cache.get_or_build(recipe_key(recipe), build, kind="kernel", name=name)
    return entry / "kernel.o"


def _aiecc(staging: Path, index: int, program, objects: dict[str, Path], toolchain) -> None:
    work = Path(tempfile.mkdtemp(prefix=".aiecc-", dir=staging.parent))
    try:
        mlir = work / "program.mlir"
        shutil.copyfile(staging / f"program{index}.mlir", mlir)
        for name, path in objects.items():  # link_with names resolve in aiecc's directory
            shutil.copyfile(path, work / name)
        command = aiecc_command(
            mlir,
            workdir=work,
            elf_name="program.elf",
            aiecc=toolchain.aiecc,
            peano=toolchain.peano,
            scratchpad=bool(program.words),
            traced=program.trace_size > 0,
            extra=FUSED_FLAGS,
        )
        _run(f"program {program.name}", "aiecc", command, work)
        if not (work / "program.elf").is_file():
            raise ToolchainError(
                f"program {program.name}: aiecc succeeded but wrote no program.elf"
            )
        shutil.move(work / "program.elf", staging / f"program{index}.elf")
        if program.words:
            shutil.move(work / "params.txt", staging / f"program{index}.params.txt")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(what: str, tool: str, command: list[str], cwd: Path) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ToolchainError(
            f"{what}: {tool} failed (exit {result.returncode}): {' '.join(command)}\n"
            f"{result.stderr or result.stdout}"
        )


def loadable(entry: Path, image: Image, *, elf: bool) -> tuple[str, ...]:
    """What XRT loads for each program of an entry: its ELF (npu) or its
    program JSON (the simulated device)."""
    suffix = "elf" if elf else "json"
    return tuple(str(entry / f"program{i}.{suffix}") for i in range(len(image.programs)))


def matches(entry: Path, image: Image) -> bool:
    """The entry's programs are exactly this image's: what the device loads
    is checked, not trusted (its checksums only say it is the file written)."""
    try:
        return all(
            files.read_text(entry / f"program{i}.json", follow_links=False) == p.to_json()
            for i, p in enumerate(image.programs)
        )
    except (OSError, ValueError):  # missing, not a regular file, not UTF-8
        return False
