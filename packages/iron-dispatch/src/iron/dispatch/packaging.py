"""Packaging: which kind of device image a compiled version is, and how
each per-call value reaches the device in it, by the original IRON's rules
(its ``image/packaging.py``).

An image is an **xclbin** with one instruction stream per step when

1. any step has a dispatch-time value (its stream is generated per call),
2. the device is npu1 (Phoenix runs xclbins: its fused full ELF is refused),
3. or the caller asks for step boundaries (separate or compare dispatch);

otherwise it is a **full ELF**: one fused program, the parameter
scratchpad carrying the per-call values. A fused sequence inside an xclbin
is not built (the original shelved it), so an xclbin dispatches step by
step.

On an xclbin there is no scratchpad (XRT gives a run its control
scratchpad only for a full-ELF module), so every per-call value becomes a
dispatch-time scalar: an offset use regenerates the step's stream, a
core-read use becomes a runtime-parameter write by the sequence
(`rtp_params`: the words iron-design's `lower(design, rtp=...)` puts in
each reading core's runtime-parameter buffer).
"""

from __future__ import annotations

import attrs

from iron.core import Device
from iron.design import Design
from iron.design.model import Loop, Param, walk
from iron.dispatch.values import derived_params, dispatch_time_members, runtime_shaped

IMAGES = ("elf", "xclbin")
#: None: one dispatch for the whole sequence; "each_step": one per step
BOUNDARIES = (None, "each_step")
#: what a caller may ask for; "auto" takes the plan's dispatch
DISPATCHES = ("auto", "fused", "separate", "compare")

#: each rule that makes an image an xclbin, by name
DISPATCH_TIME = "dispatch-time value"
NPU1 = "npu1 runs xclbins"
BOUNDARIES_ASKED = "step boundaries asked for"


class PackagingError(ValueError):
    """A caller forced an image or a dispatch that a packaging rule forbids."""


@attrs.frozen
class Lowering:
    """How one step's per-call member receives its value in an image."""

    step: int
    operator: str
    member: str
    value: str  # the graph's expression bound to it (``pos * 128 + 64``)
    how: str  # "scratchpad", "stream" (the stream is regenerated), "rtp", "host"

    def __str__(self) -> str:
        said = {
            "scratchpad": "patched through the parameter scratchpad",
            "stream": "a dispatch-time scalar: a new value regenerates the step's stream",
            "rtp": "a dispatch-time scalar: a runtime-parameter write by the step's sequence",
            "host": "passed to the step's host model",
        }[self.how]
        return f"step {self.step} ({self.operator}).{self.member} = {self.value}: {said}"


@attrs.frozen
class Plan:
    image: str  # "elf", "xclbin", or "host" (a host backend builds no device image)
    dispatch: str  # "fused" (elf), "separate" or "compare" (xclbin)
    reasons: tuple[str, ...]  # the rules that made it an xclbin, each said in full

    def report(self, name: str, lowering=()) -> str:
        """What `verbose` shows: the image, why, and each value's lowering."""
        why = "; ".join(self.reasons) if self.reasons else "no rule asks for an xclbin"
        lines = [f"{name}: {self.image} image, {self.dispatch} dispatch ({why})"]
        return "\n".join([*lines, *(f"  {line}" for line in lowering)])


def plan(device: Device, runlist, boundaries=None, image=None, dispatch="auto") -> Plan:
    """The image of `runlist` on `device` by the rules above. `boundaries`
    ("each_step") and `dispatch` ("separate", "compare") ask for step
    boundaries; `image` ("elf", "xclbin") or `dispatch="fused"` forces a
    kind. A force that a rule forbids is a `PackagingError` naming the rule."""
    name = runlist.name
    if image not in (None, *IMAGES):
        raise ValueError(f"{name}: image={image!r}: one of None, 'elf', 'xclbin'")
    if boundaries not in BOUNDARIES:
        raise ValueError(f"{name}: boundaries={boundaries!r}: None or 'each_step'")
    if dispatch not in DISPATCHES:
        raise ValueError(f"{name}: dispatch={dispatch!r}: one of {', '.join(DISPATCHES)}")
    reasons = rules(device, runlist, boundaries, dispatch)
    if image == "elf" and reasons:
        raise PackagingError(f"{name}: image='elf' is refused: {reasons[0]}")
    if dispatch == "fused" and (reasons or image == "xclbin"):
        why = reasons[0] if reasons else "image='xclbin' was asked for"
        raise PackagingError(
            f"{name}: dispatch='fused' needs a full ELF and is refused: {why} (a fused "
            "sequence inside an xclbin is not built; use dispatch 'auto' or 'separate')"
        )
    if image == "xclbin" and not reasons:
        reasons.append("image='xclbin' was asked for")
    if not reasons:
        return Plan("elf", "fused", ())
    return Plan("xclbin", dispatch if dispatch == "compare" else "separate", tuple(reasons))


def rules(device: Device, runlist, boundaries=None, dispatch="auto") -> list[str]:
    """Each rule that makes `runlist`'s image on `device` an xclbin, said in full."""
    reasons = []
    for index, step in enumerate(runlist.steps):
        if runtime_shaped(step.op):
            members = [m for m in dispatch_time_members(step.op) if m in step.bindings]
            said = f"binds {', '.join(members)} per call" if members else "is runtime-shaped"
            reasons.append(
                f"{DISPATCH_TIME}: step {index} ({type(step.op).__name__}) {said}, so its "
                "stream is generated per values"
            )
            break
    if device is not None and device.name == "npu1":
        reasons.append(f"{NPU1}: Phoenix loads xclbins, its fused full ELF is refused")
    if boundaries == "each_step" or dispatch in ("separate", "compare"):
        asked = f"dispatch={dispatch!r}" if dispatch != "auto" else "boundaries='each_step'"
        reasons.append(f"{BOUNDARIES_ASKED}: {asked}")
    return reasons


def record(runlist, dispatch: str, design_of) -> dict:
    """What a compiled image's cache entry says of its packaging (`iron
    cache info` shows it): the image, the rules behind it, each value's
    lowering."""
    image = "elf" if dispatch == "fused" else "xclbin"
    # a full ELF compiled through a backend directly says no rule (none made it one)
    reasons = rules(runlist.device, runlist, dispatch=dispatch) if image == "xclbin" else []
    packaged = Plan(image, dispatch, tuple(reasons))
    lowered = lowering(packaged, runlist, design_of)
    return {"image": image, "dispatch": dispatch, "reasons": list(packaged.reasons),
            "lowering": [str(line) for line in lowered]}  # fmt: skip


def param_uses(design: Design) -> dict[str, frozenset[str]]:
    """Each design parameter's uses: "offset" (added to a shim task's
    address by the runtime sequence) and "core" (read by a worker: a kernel
    argument or a loop count)."""
    uses: dict[str, set[str]] = {p: set() for p in design.params}
    for statement in design.sequence:
        name = getattr(statement, "offset_param", None)
        if name is not None:
            uses[name].add("offset")
    for worker in design.workers:
        for op in walk(worker.body):
            read = [op.count] if isinstance(op, Loop) else list(getattr(op, "args", ()))
            for arg in read:
                if isinstance(arg, Param):
                    uses[arg.name].add("core")
    return {p: frozenset(u) for p, u in uses.items()}


def rtp_params(design: Design, step) -> frozenset[str]:
    """The parameters of one-step program step `step` (a `ProgramStep`) of
    `design` that an xclbin carries as runtime-parameter words: the per-call
    ones its cores read (every parameter of a runtime-shaped step is per
    call: its stream brings them). Constants stay folded into the link."""
    if step.stream:
        per_call = set(design.params)
    else:
        per_call = {n for n, w, _ in step.params if w >= 0}
    uses = param_uses(design)
    return frozenset(p for p in per_call if "core" in uses[p])


def member_uses(design: Design) -> dict[str, frozenset[str]]:
    """Each per-call member's uses (`param_uses`) through the parameters
    the design declares carry it (`Design.member`), never by name."""
    found: dict[str, frozenset[str]] = {}
    for param, used in param_uses(design).items():
        member = design.member(param)
        if member is not None:
            found[member] = found.get(member, frozenset()) | used
    return found


def lowering(plan: Plan, runlist, design_of) -> tuple[Lowering, ...]:
    """How each bound per-call member of `runlist` reaches the device in an
    image of `plan`; `design_of(op)` is the step's design (None: a host
    step), asked only on an xclbin."""
    found, uses = [], {}
    for index, step in enumerate(runlist.steps):
        for member, expression in step.bindings.items():
            if not expression.terms:
                continue  # a constant: folded in, nothing per call
            how = {"elf": "scratchpad", "host": "host"}.get(plan.image)
            if plan.image == "xclbin":
                if step.op not in uses:
                    design = design_of(step.op)
                    uses[step.op] = None if design is None else member_uses(design)
                used = uses[step.op]
                if used is None:
                    how = "host"
                elif member in dispatch_time_members(step.op) or "core" not in used.get(member, ()):
                    how = "stream"
                else:
                    how = "rtp"
            name = type(step.op).__name__
            found.append(Lowering(index, name, member, str(expression), how))
        if plan.image == "xclbin" and runtime_shaped(step.op):
            design = design_of(step.op)
            if design is not None:  # derived words its cores read, written per call
                read = param_uses(design)
                words = [p for p in derived_params(design) if "core" in read[p]]
                if words:
                    derived = ", ".join(words)
                    value = "derived from its dispatch-time values"
                    found.append(Lowering(index, type(step.op).__name__, derived, value, "rtp"))
    return tuple(found)
