"""The compile pipeline: an image's data artifacts, in the compile cache.

Per compiled version, one entry keyed by the image's identity (design
digests, runlist, layout, trace size, backend, mode, flags; see
`identity.key_text`) holding:

- ``image.json``: the steps as data (operator identities and placements);
- ``program<i>.json``: each device program, which the simulated XRT loads;
- ``program<i>.mlir``: its fused MLIR, when every step has a design (an
  xclbin image: the stream module of a step whose parameters are all
  constants, and ``link<k>.mlir`` for each distinct design);
- an xclbin image (separate, compare): ``image.xclbin.json``, its kernels
  (one per distinct design, each with its instance name and id), what the
  simulated XRT loads; with a toolchain ``image.xclbin`` from a chain of
  aiecc links (one per distinct design, each adding its kernel to the
  previous xclbin) and ``program<i>.insts.bin`` for each static stream;
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

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from iron.core import files
from iron.design import Design, ToolchainError, aiecc_command
from iron.design.aiecc import (
    PEANO_FLAGS,
    Toolchain,
    instructions_command,
    kernel_commands,
    kernel_inputs,
    xclbin_command,
)
from iron.design.mlir import kernel_objects
from iron.design.model import canonical
from iron.dispatch.cache import CompileCache, file_sha256
from iron.dispatch.fusion import object_names, program_mlir, xclbin_mlir
from iron.dispatch.identity import digest
from iron.dispatch.image import Image
from iron.dispatch.packaging import rtp_params
from iron.dispatch.program import FusionError, Program
from iron.dispatch.streams import design_at, design_key
from iron.dispatch.values import design_params

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
    emitted, xclbin = 0, image.mode != "fused" and bool(image.programs)
    modules: dict[tuple, str] = {}  # an xclbin's stream modules, by design and constants
    for i, program in enumerate(image.programs):
        (staging / f"program{i}.json").write_text(program.to_json())
        if any(s.device is None for s in program.steps):
            continue
        if not xclbin:
            # a runtime-shaped step's sequence and derived words come per
            # call (`iron.dispatch.streams`): no one fused module holds them
            if not any(s.stream for s in program.steps):
                (staging / f"program{i}.mlir").write_text(program_mlir(program, image.designs))
                emitted += 1
        elif (static := static_stream(image, program)) is not None:
            design, constants = static
            step = program.steps[0]
            key = (step.digest, tuple(sorted(constants.items())))  # 16 layers: one module each
            if key not in modules:
                rtp = rtp_params(design, step)
                modules[key] = xclbin_mlir(design, step.device, constants, rtp)
            (staging / f"program{i}.mlir").write_text(modules[key])
            emitted += 1
    if xclbin:
        (staging / SIM_XCLBIN).write_text(json.dumps(xclbin_record(image), indent=1))
    if toolchain is not None and image.programs:
        hosted = sum(s.device is None for p in image.programs for s in p.steps)
        if hosted:
            raise FusionError(
                f"{image.name}: {image.design_summary()}; aiecc compiles designs only"
            )
        shaped = sorted({s.operator for p in image.programs for s in p.steps if s.stream})
        if shaped and not xclbin:
            raise FusionError(
                f"{image.name}: runtime-shaped steps ({', '.join(shaped)}) take an instruction "
                "stream per call, which only the xclbin packaging loads; a full ELF cannot"
            )
        built = {
            name: kernel_object(recipe, name, toolchain, cache) for name, recipe in objects.items()
        }
        if xclbin:
            _xclbin_chain(staging, image, built, toolchain)
        else:
            for i, program in enumerate(image.programs):
                _aiecc(staging, i, program, built, toolchain)
    return {"programs": len(image.programs), "mlir": emitted, "designs": len(designs),
            "toolchain": toolchain is not None, "image": "xclbin" if xclbin else "elf"}  # fmt: skip


# ---- xclbin images ----------------------------------------------------------------

#: the simulated XRT's xclbin (its kernels as JSON) and aiecc's
SIM_XCLBIN = "image.xclbin.json"
XCLBIN = "image.xclbin"
#: the first kernel id aiecc gives (its --xclbin-kernel-id default); the chain counts up
FIRST_KERNEL_ID = 0x901


def program_kernel(program: Program) -> str:
    """The xclbin kernel a one-step program runs: its device block (a
    runtime-shaped step's is named by its configuration, so every value
    of its dispatch-time parameters runs one kernel), or its host model on
    the simulated device."""
    step = program.steps[0]
    return step.device or f"host_{step.host}"


def xclbin_record(image: Image) -> dict:
    """The image's xclbin as data: one kernel per distinct device block (a
    design, or a runtime-shaped step's configuration) or host model, in
    order of first use, each with an instance name under xclbinutil's 64
    characters (a 6-character hash of the image's name and the kernel's
    place, as the original IRON names them), an id counting up from
    0x901, and the parameters its cores read from runtime-parameter
    buffers (`rtp_params`); its uuid is a digest of all that."""
    prefix = hashlib.sha1(image.name.encode()).hexdigest()[:6]
    kernels: dict[str, dict] = {}
    for program in image.programs:
        name, step = program_kernel(program), program.steps[0]
        if name not in kernels:
            k = len(kernels)
            design = image.designs.get(step.digest) if step.digest else None
            rtp = sorted(rtp_params(design, step)) if design is not None else []
            kernels[name] = {"name": name, "instance": f"{prefix}_op{k}",
                             "id": FIRST_KERNEL_ID + k, "digest": step.digest, "host": step.host,
                             "rtp": rtp}  # fmt: skip
    record = {"name": image.name, "device": image.device, "kernels": list(kernels.values())}
    return {"uuid": digest(json.dumps(record, sort_keys=True))[:32], **record}


def static_stream(image: Image, program: Program) -> tuple[Design, dict[str, int]] | None:
    """The design and parameter words of a one-step program's stream when
    they are the same for every call (its stream is compiled once): every
    parameter and dispatch-time value a constant (a runtime-shaped step's
    design and derived words at those values, `iron.dispatch.streams`);
    else None (a stream per call's values)."""
    step = program.steps[0]
    if any(w >= 0 for _, w, _ in (*step.params, *step.values)):
        return None
    design = image.designs[step.digest]
    if not step.stream:
        return design, {n: c for n, _, c in step.params}
    op, values = image.steps[step.index].op, {m: c for m, _, c in step.values}
    design = design_at(op, design, values)
    return design, design_params(op, design, values)


def link_constants(design: Design, program: Program) -> dict[str, int]:
    """What the xclbin link folds in for each parameter: a constant as
    bound; 0 for a per-call value (a runtime-shaped step's derived words
    are per call too), which only the stream carries: in a task's offset,
    or as a runtime-parameter write for a word a core reads (`rtp_params`:
    the link's cores read those from their runtime-parameter buffers)."""
    fixed = {n: c for n, w, c in program.steps[0].params if w < 0}
    return {name: fixed.get(name, 0) for name in design.params}


def _xclbin_chain(staging: Path, image: Image, objects: dict[str, Path], toolchain) -> None:
    """One aiecc link per distinct design, each adding its kernel to the
    previous xclbin; then each static stream, instructions only."""
    record = xclbin_record(image)
    first, linked, structures = {}, {}, {}
    for program in image.programs:
        name = program_kernel(program)
        first.setdefault(name, program)
        design = image.designs[program.steps[0].digest]
        constants = link_constants(design, program)
        if linked.setdefault(name, constants) != constants:
            raise FusionError(
                f"{program.name}: {name} is linked with constants {linked[name]} at an earlier "
                f"step and {constants} here; one xclbin kernel holds one core program"
            )
        # a runtime-shaped step's designs at other values share the kernel:
        # only their sequences may differ
        if structures.setdefault(name, design_key(design)) != design_key(design):
            raise FusionError(
                f"{program.name}: design {design.name} shares kernel {name} with an earlier "
                "step's but makes another configuration; one xclbin kernel is one configuration"
            )
    previous = None
    for kernel in record["kernels"]:
        program = first[kernel["name"]]
        design = image.designs[kernel["digest"]]
        constants = link_constants(design, program)
        mlir = xclbin_mlir(design, kernel["name"], constants, kernel["rtp"])
        (staging / f"link{kernel['id'] - FIRST_KERNEL_ID}.mlir").write_text(mlir)

        def link(work: Path, kernel=kernel, previous=previous) -> list[str]:
            for name, path in objects.items():  # link_with names resolve in aiecc's directory
                shutil.copyfile(path, work / name)
            return xclbin_command(
                work / "program.mlir", workdir=work, xclbin_name="chain.xclbin",
                kernel_name=kernel["name"], instance_name=kernel["instance"],
                kernel_id=kernel["id"], xclbin_input=previous, aiecc=toolchain.aiecc,
                peano=toolchain.peano,
            )  # fmt: skip

        built = staging / f".chain{kernel['id'] - FIRST_KERNEL_ID}.xclbin"
        _in_workdir(staging, mlir, link, "chain.xclbin", built, f"link {kernel['name']}")
        previous = built
    shutil.move(previous, staging / XCLBIN)
    for stale in staging.glob(".chain*.xclbin"):
        stale.unlink()
    for i, program in enumerate(image.programs):
        if (staging / f"program{i}.mlir").is_file():  # a static stream
            text = (staging / f"program{i}.mlir").read_text()
            compile_stream(text, staging / f"program{i}.insts.bin", toolchain, program.name)


def compile_stream(mlir: str, target: Path, toolchain, what: str) -> None:
    """An instructions-only compile of `mlir` (an `xclbin_mlir` module with
    this call's constants) into `target`: no Peano, no cores."""

    def command(work: Path) -> list[str]:
        return instructions_command(
            work / "program.mlir", workdir=work, insts_name="stream.bin", aiecc=toolchain.aiecc
        )

    _in_workdir(target.parent, mlir, command, "stream.bin", target, f"stream of {what}")


def _in_workdir(near: Path, mlir: str, command, output: str, target: Path, what: str) -> None:
    """Run aiecc on `mlir` in a scratch directory beside `near`; move its
    `output` to `target`."""
    work = Path(tempfile.mkdtemp(prefix=".aiecc-", dir=near.parent))
    try:
        (work / "program.mlir").write_text(mlir)
        _run(what, "aiecc", command(work), work)
        if not (work / output).is_file():
            raise ToolchainError(f"{what}: aiecc succeeded but wrote no {output}")
        shutil.move(work / output, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


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


def loadable(entry: Path, image: Image, *, elf: bool) -> dict:
    """What XRT loads for an entry's image (`Image` fields): per program its
    ELF (npu) or program JSON (the simulated device); on an xclbin image
    the xclbin and, per program, its static stream (npu; "" for a stream
    made per call) or its program JSON (the simulated device)."""
    count = range(len(image.programs))
    if image.mode == "fused":
        suffix = "elf" if elf else "json"
        return {"elves": tuple(str(entry / f"program{i}.{suffix}") for i in count)}
    if not elf:
        return {"xclbin": str(entry / SIM_XCLBIN),
                "elves": tuple(str(entry / f"program{i}.json") for i in count)}  # fmt: skip
    streams = tuple(
        str(entry / f"program{i}.insts.bin") if (entry / f"program{i}.insts.bin").is_file() else ""
        for i in count
    )
    return {"xclbin": str(entry / XCLBIN), "elves": streams}


def read_programs(entry: Path, image: Image) -> tuple[Program, ...] | None:
    """The programs of a valid entry, read back for a hit (None: they are
    not this image's, and the entry is rebuilt): one fused program over
    every step, or one program per step, each step the image's operator."""
    programs = []
    try:
        while (path := entry / f"program{len(programs)}.json").is_file():
            programs.append(Program.from_json(files.read_bytes(path, follow_links=False), path))
    except (OSError, ValueError):
        return None
    steps = [s for p in programs for s in p.steps]
    expected = 1 if image.mode == "fused" else len(image.steps)
    if len(programs) != expected or [s.index for s in steps] != list(range(len(image.steps))):
        return None
    if any(s.operator != type(image.steps[s.index].op).__name__ for s in steps):
        return None
    return tuple(programs)
