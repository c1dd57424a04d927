"""The program a device runs: from a runlist, its layout and its steps'
designs, one program per sequence (fused) or one per step (separate), as
plain data that is written to the cache as JSON and read back by the
simulated XRT device as its "ELF".

A program's runtime arguments are the consolidated buffers, in this order:
input, output, scratch and, when traced, the trace buffer. Each step names
the device block it configures (``<Operator>_<design digest[:8]>``, so a
design repeated at 16 layers is one device; in a step-by-step image, a
runtime-shaped step's is ``<Operator>_<configuration digest[:8]>``, so its
designs at every value are one xclbin kernel, one link, a stream per value)
or, for an operator without a design, the host model it falls back to; its
arguments are views of the consolidated buffers at the planned offsets; its
design parameters read words of the 32-word parameter scratchpad (or
constants), each bound by the member it carries (`iron.dispatch.values`). A
runtime-shaped step also carries its operator's values, from which the
simulated device takes the stream and derived words of each call
(`iron.dispatch.streams`).
"""

from __future__ import annotations

import json

import attrs

from iron.core import Operator, dtype_name, files
from iron.design import Design, design_of, has_design
from iron.design.model import element_type
from iron.dispatch.identity import digest
from iron.dispatch.streams import configuration_key
from iron.dispatch.values import (
    BindingError,
    member_bindings,
    member_params,
    runtime_shaped,
    step_values,
)

#: runtime arguments of every program, in order; "trace" only when traced
ARGUMENTS = ("input", "output", "scratch", "trace")
#: a program view must start on a 4-byte boundary (a shim DMA address is in
#: 32-bit words: mlir-aie `getAddressGenGranularity`); IRON aligns to 64
VIEW_ALIGNMENT = 4


#: a view of a runtime argument: argument index, byte offset, bytes, dtype name, shape
ViewOf = tuple[int, int, int, str, tuple[int, ...]]


class FusionError(ValueError):
    """A step whose design does not fit its operator's buffers."""


@attrs.frozen
class ProgramStep:
    index: int  # the step's place in the runlist
    operator: str
    device: str | None  # the device block this step configures; None: a host step
    digest: str | None  # the design's digest
    host: str | None  # the host model's key, for a step without a design
    args: tuple[ViewOf, ...]
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    # design parameters carrying a member (a host step: per-call members):
    # name, word (-1: constant), constant (`iron.dispatch.values`)
    params: tuple[tuple[str, int, int], ...]
    # the operator's per-call members, bound the same way
    values: tuple[tuple[str, int, int], ...] = ()
    # runtime-shaped: derived parameters and the runtime sequence come per
    # values from `iron.dispatch.streams`
    stream: bool = False


@attrs.frozen
class Program:
    name: str
    device: str  # the Device key
    steps: tuple[ProgramStep, ...]
    sizes: tuple[int, ...]  # bytes of each runtime argument
    words: tuple[int, ...]  # scratchpad word i holds the image's parameter words[i]
    trace_size: int = 0

    @property
    def devices(self) -> dict[str, str]:
        """Device block name -> design digest, in order of first use."""
        return {s.device: s.digest for s in self.steps if s.device is not None}

    def to_json(self) -> str:
        """Compact JSON (json's C encoder: a 300-step program in about a
        millisecond, where indenting takes the pure-Python one and 100x that)."""
        fields = [f.name for f in attrs.fields(ProgramStep)]
        data = {f.name: getattr(self, f.name) for f in attrs.fields(Program)}
        data["steps"] = [{f: getattr(s, f) for f in fields} for s in self.steps]
        return json.dumps(data, separators=(",", ":"))

    @staticmethod
    def from_json(text: str | bytes, where: str = "program") -> Program:
        """A program read back; anything but a program's JSON (not JSON, a
        key twice, a field missing, unknown or of the wrong JSON type) is a
        ValueError naming `where` (the file) and the field."""
        data = files.parse_json(text, where)
        _fields(where, "", data, [f.name for f in attrs.fields(Program)], ["trace_size"])
        for field in ("name", "device"):
            files.expect(where, field, data[field], "a string")
        files.expect(where, "trace_size", data.get("trace_size", 0), "an integer")
        sizes, words = (
            _integers(where, "sizes", data["sizes"]),
            _integers(where, "words", data["words"]),
        )
        steps = [
            _step(where, f"steps[{i}]", s)
            for i, s in enumerate(files.expect(where, "steps", data["steps"], "an array"))
        ]
        return Program(**{**data, "steps": tuple(steps), "sizes": sizes, "words": words})


def _fields(where: str, at: str, data, names: list[str], optional=()) -> None:
    files.expect(where, at or "the program", data, "an object")
    missing = [n for n in names if n not in data and n not in optional]
    unknown = [n for n in data if n not in names]
    if missing or unknown:
        raise ValueError(
            f"{where}: {at or 'the program'}: not an IRON program's "
            f"(missing {missing or 'nothing'}, unknown {unknown or 'nothing'})"
        )


def _integers(where: str, field: str, value) -> tuple[int, ...]:
    files.expect(where, field, value, "an array")
    return tuple(files.expect(where, f"{field}[{i}]", v, "an integer") for i, v in enumerate(value))


def _step(where: str, at: str, data) -> ProgramStep:
    _fields(where, at, data, [f.name for f in attrs.fields(ProgramStep)], ["values", "stream"])
    files.expect(where, f"{at}.index", data["index"], "an integer")
    files.expect(where, f"{at}.operator", data["operator"], "a string")
    for field in ("device", "digest", "host"):
        files.expect(where, f"{at}.{field}", data[field], "a string", "null")
    args = []
    for i, view in enumerate(files.expect(where, f"{at}.args", data["args"], "an array")):
        field = f"{at}.args[{i}]"
        if not isinstance(view, list) or len(view) != 5:
            raise ValueError(f"{where}: {field}: an array of argument, offset, bytes, dtype, shape")
        argument, offset, nbytes = _integers(where, field, view[:3])
        dtype = files.expect(where, f"{field}[3]", view[3], "a string")
        args.append((argument, offset, nbytes, dtype, _integers(where, f"{field}[4]", view[4])))
    files.expect(where, f"{at}.stream", data.get("stream", False), "true or false")
    return ProgramStep(
        **{**data, "args": tuple(args),
           "params": _bindings(where, f"{at}.params", data["params"]),
           "values": _bindings(where, f"{at}.values", data.get("values", [])),
           "reads": _integers(where, f"{at}.reads", data["reads"]),
           "writes": _integers(where, f"{at}.writes", data["writes"])}
    )  # fmt: skip


def _bindings(where: str, at: str, data) -> tuple[tuple[str, int, int], ...]:
    out = []
    for i, binding in enumerate(files.expect(where, at, data, "an array")):
        field = f"{at}[{i}]"
        if not isinstance(binding, list) or len(binding) != 3:
            raise ValueError(f"{where}: {field}: an array of name, word, constant")
        name = files.expect(where, f"{field}[0]", binding[0], "a string")
        out.append((name, *_integers(where, field, binding[1:])))
    return tuple(out)


def device_name(op: Operator, design_digest: str) -> str:
    return f"{type(op).__name__}_{design_digest[:8]}"


def configuration_name(op: Operator, design: Design) -> str:
    """The device block of a runtime-shaped step on an xclbin: named by the
    configuration its designs at every value share (`configuration_key`)."""
    return f"{type(op).__name__}_{digest(configuration_key(op, design))[:8]}"


def host_key(op: Operator) -> str:
    """What names a host step's model: the operator's identity."""
    return digest(op.identity_text())[:16]


def step_design(op: Operator, where: str) -> Design | None:
    """The operator's design, checked against its arg specs (one runtime
    tensor per spec, in order, with the spec's bytes and direction); None
    for an operator without one."""
    if not has_design(type(op)):
        return None
    if op.device is None:
        raise FusionError(
            f"{where}: {type(op).__name__} has a design, and a design is for one device: "
            "lay the runlist out for a device (OperatorSequence(..., device=...))"
        )
    design = design_of(op)
    specs = op.arg_specs()
    if len(design.tensors) != len(specs):
        raise FusionError(
            f"{where}: design {design.name} has {len(design.tensors)} runtime tensors for "
            f"{len(specs)} arg specs ({', '.join(s.name for s in specs)})"
        )
    for tensor, spec in zip(design.tensors, specs):
        if tensor.nbytes != spec.nbytes or tensor.direction is not spec.direction:
            raise FusionError(
                f"{where}: design {design.name} tensor {tensor.name} is {tensor.nbytes} B "
                f"{tensor.direction.value}, but arg spec {spec.name} is {spec.nbytes} B "
                f"{spec.direction.value}"
            )
    return design


def _bindings_of(step, design: Design | None, where: str) -> dict:
    """A step's params, values and stream flag (see `ProgramStep`)."""
    members = member_bindings(step.op, step.words, step.constants)
    if design is None:
        return {"params": members}
    try:
        params = member_params(step.op, design, members, where)
    except BindingError as error:
        raise FusionError(str(error)) from None
    shaped = runtime_shaped(step.op)
    return {"params": params, "values": members if shaped else (), "stream": shaped}


def plan_programs(image, designs: dict) -> tuple[Program, ...]:
    """The programs of `image` (`iron.dispatch.image.Image`): one for a fused
    image, one per step otherwise. `designs` maps step index -> (Design,
    its digest)."""
    traced = image.trace_size > 0
    sizes = tuple(image.sizes[a] for a in ARGUMENTS[:3]) + ((image.trace_size,) if traced else ())
    steps, hosts = [], {}  # equal operators recur across layers: one key each
    for index, step in enumerate(image.steps):
        where = f"{image.name} step {index} ({type(step.op).__name__})"
        design, design_digest = designs.get(index, (None, None))
        args = []
        for placement in step.args:
            if placement.offset % VIEW_ALIGNMENT:
                raise FusionError(
                    f"{where}: a view at {placement.arena} offset {placement.offset} is not "
                    f"{VIEW_ALIGNMENT}-byte aligned"
                )
            args.append((ARGUMENTS.index(placement.arena), placement.offset, placement.nbytes,
                         dtype_name(placement.dtype), tuple(placement.shape)))  # fmt: skip
        block = None
        if design is not None:
            shaped = image.mode != "fused" and runtime_shaped(step.op)
            block = (configuration_name if shaped else device_name)(
                step.op, design if shaped else design_digest
            )
            # the simulated device views each tensor in the design's own shape and type
            args = [
                (a, o, n, dtype_name(element_type(t.dtype).numpy), tuple(t.shape))
                for (a, o, n, _, _), t in zip(args, design.tensors)
            ]
        steps.append(
            ProgramStep(
                index=index,
                operator=type(step.op).__name__,
                device=block,
                digest=design_digest,
                host=None
                if design is not None
                else hosts.get(step.op) or hosts.setdefault(step.op, host_key(step.op)),
                args=tuple(args),
                reads=step.reads,
                writes=step.writes,
                **_bindings_of(step, design, where),
            )
        )
    common = {"device": image.device, "sizes": sizes, "trace_size": image.trace_size}
    if image.mode == "fused":
        words = tuple(range(len(image.parameters)))
        return (Program(name=image.name, steps=tuple(steps), words=words, **common),)
    return tuple(_one_step(f"{image.name}.step{s.index}", s, common) for s in steps)


def call_values(program: Program, words) -> tuple[dict[str, int], dict[str, int]]:
    """A one-step program's parameter words and dispatch-time values for
    one call (`words`: the image's parameter words, evaluated for it),
    read through the program's own words by `step_values`."""
    step = program.steps[0]
    local = [words[w] for w in program.words]
    return step_values(step.params, local), step_values(step.values, local)


def _one_step(name: str, step: ProgramStep, common: dict) -> Program:
    """A program of one step, its words renumbered from 0 (one scratchpad each)."""
    used = sorted({w for _, w, _ in (*step.params, *step.values) if w >= 0})
    local = {w: i for i, w in enumerate(used)}

    def renumbered(bindings):
        return tuple((n, local[w] if w >= 0 else w, c) for n, w, c in bindings)

    step = attrs.evolve(step, params=renumbered(step.params), values=renumbered(step.values))
    return Program(name=name, steps=(step,), words=tuple(used), **common)
