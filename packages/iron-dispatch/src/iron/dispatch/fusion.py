"""MLIR of a program, composed of `iron.design.device_block`s: one
``aie.device`` per distinct design and a ``main`` device whose runtime
sequence, step by step, configures that device (once for consecutive steps
on one device) and runs its sequence on views of the consolidated arguments
(input, output, scratch, and trace when traced), the way IRON fuses a
sequence into one full ELF.

What each design's block is given, and why:

- its device symbol, ``<Operator>_<digest[:8]>``;
- no ``aiex.npu.load_pdi`` of its own: a child that loads its own PDI
  fights the fusion's PDI switching and the NPU hangs with
  ERT_CMD_STATE_TIMEOUT (IRON generates children with full-ELF off for
  this reason); nor its own scratchpad sync, which ``main`` does once;
- its scratchpad parameters bound to the program's words ``@w<i>``,
  declared at module scope; a parameter bound to a constant becomes that
  constant (in a transfer's offset, part of the static offset);
- its kernel objects under their own names unless another design builds an
  object of that name differently (one symbol compiled with per-size
  defines): then each build gets its own name (`object_names`).

The blocks come as structured values; nothing here reads or edits MLIR text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping

from iron.design import Design
from iron.design.mlir import DeviceBlock, device_block, kernel_objects
from iron.dispatch.program import ARGUMENTS, FusionError, Program, ProgramStep


def object_names(designs: Mapping[str, Design]) -> dict[tuple[str, str], str]:
    """(design digest, object its MLIR links) -> the object's name in the
    fused program: unchanged where every design builds that object the same
    way; otherwise one name per build, so no block links another's code."""
    builds: dict[tuple[str, str], tuple] = {}
    for digest, design in designs.items():
        for kernel, name in kernel_objects(design).items():
            builds[digest, name] = (kernel.source, kernel.flags)
    distinct: dict[str, set] = {}
    for (_, name), build in builds.items():
        distinct.setdefault(name, set()).add(build)
    return {
        (digest, name): name
        if len(distinct[name]) == 1
        else f"{name.removesuffix('.o')}_{hashlib.sha256(repr(build).encode()).hexdigest()[:8]}.o"
        for (digest, name), build in builds.items()
    }


def _bindings(program: Program) -> dict[str, dict[str, tuple[int, int]]]:
    """Per device block, each parameter's (word, constant): one binding for
    every step that runs the block, since the block's code reads one symbol."""
    found: dict[str, dict[str, tuple[int, int]]] = {}
    for step in program.steps:
        if step.device is None:
            continue
        table = found.setdefault(step.device, {})
        for name, word, constant in step.params:
            if table.setdefault(name, (word, constant)) != (word, constant):
                raise FusionError(
                    f"{program.name} step {step.index} ({step.operator}): parameter {name} of "
                    f"device {step.device} is bound otherwise than at an earlier step; one device "
                    "block reads one scratchpad word"
                )
    return found


def child(
    design: Design,
    name: str,
    bindings: dict[str, tuple[int, int]],
    objects: Mapping[str, str] | None = None,
) -> DeviceBlock:
    """The design's device block for fusion: named `name`, its parameters
    bound as `bindings` says ((word, constant): the program's word ``@w<word>``,
    or the constant where word is -1), its kernel objects renamed by
    `objects`, loading no PDI of its own."""
    params = {
        parameter: f"w{word}" if word >= 0 else constant
        for parameter, (word, constant) in bindings.items()
    }
    return device_block(design, symbol=name, params=params, objects=objects, load_pdi=False)


def _run_lines(step: ProgramStep, types: list[str], sizes: tuple[int, ...]) -> list[str]:
    """One step's views of the consolidated arguments and its run."""
    lines, views = [], []
    for i, ((argument, offset, _, _, _), memref) in enumerate(zip(step.args, types)):
        value = f"%s{step.index}_{i}"
        lines += [
            f"%o{step.index}_{i} = arith.constant {offset} : index",
            f"{value} = memref.view %{ARGUMENTS[argument]}[%o{step.index}_{i}][] : "
            f"memref<{max(1, sizes[argument])}xi8> to {memref}",
        ]
        views.append(value)
    lines.append(f"aiex.run @sequence({', '.join(views)}) : ({', '.join(types)})")
    return lines


def _configure_points(program: Program, types) -> list[list[str]]:
    """One ``aiex.configure`` per run of consecutive steps on one device
    (IRON's fusion shares the point the same way). Under
    ``--expand-load-pdis`` each point loads one of two PDIs in turn, so an
    odd count would leave the next call reconfiguring over stale state: an
    extra configuration evens it (IRON's ``needs_additional_reset``)."""
    points: list[tuple[str, list[str]]] = []
    for step in program.steps:
        if not points or points[-1][0] != step.device:
            points.append((step.device, []))
        points[-1][1].extend(_run_lines(step, types[step.device], program.sizes))
    if len(points) % 2:
        points.append((points[-1][0], []))
    return [
        [f"aiex.configure @{device} {{", *("  " + line for line in body), "}"]
        for device, body in points
    ]


def program_mlir(program: Program, designs: dict[str, Design]) -> str:
    """The program as one MLIR module for ``aiecc --get-full-elf``. Steps
    without a design run on the host between device steps, which a full ELF
    cannot do: such a program is refused (the sim backend runs it through
    the simulated device instead)."""
    host = [s for s in program.steps if s.device is None]
    if host:
        listed = ", ".join(sorted({s.operator for s in host}))
        raise FusionError(
            f"{program.name}: {len(host)} step(s) have no design ({listed}); a device program "
            "runs designs only"
        )
    bindings = _bindings(program)
    objects = object_names(designs)
    children, types, arch = [], {}, None
    for name, digest in program.devices.items():
        linked = {original: fused for (d, original), fused in objects.items() if d == digest}
        block = child(designs[digest], name, bindings.get(name, {}), linked)
        types[name] = block.argument_types
        arch = arch or block.device
        children.append(block.text)
    arguments = ", ".join(
        f"%{ARGUMENTS[i]}: memref<{max(1, n)}xi8>" for i, n in enumerate(program.sizes)
    )
    body = ["aiex.sync_scratchpad_parameters_from_host"] if program.words else []
    for point in _configure_points(program, types):
        body += point
    lines = ["module {"]
    lines += [f"  aiex.scratchpad_parameter @w{i} : i32" for i in range(len(program.words))]
    lines += children
    lines += [
        f"  aie.device({arch}) @main {{",
        f"    aie.runtime_sequence @sequence({arguments}) {{",
    ]
    lines += ["      " + line for line in body]
    lines += ["    }", "  }", "}"]
    return "\n".join(lines) + "\n"


def xclbin_mlir(
    design: Design, name: str, constants: Mapping[str, int], rtp: Collection[str] = ()
) -> str:
    """A module of one device block, `name`, for an xclbin: the link that
    adds its configuration to the chain, or (with this call's `constants`
    for its parameters) the instructions-only compile of its stream. No
    scratchpad (an xclbin has none) and no PDI load of its own: the
    hardware context loads the xclbin's. The parameters named in `rtp`
    (`iron.dispatch.packaging.rtp_params`) are words of the reading cores'
    runtime-parameter buffers, which the stream writes with the call's
    constants; link and stream name the same ones, so they are one
    configuration."""
    missing = [p for p in design.params if p not in constants]
    if missing:
        raise FusionError(
            f"design {design.name}: an xclbin block takes every parameter as a constant "
            f"(missing {', '.join(missing)})"
        )
    block = device_block(design, symbol=name, params=dict(constants), load_pdi=False, rtp=rtp)
    return "\n".join(["module {", block.text, "}"]) + "\n"
