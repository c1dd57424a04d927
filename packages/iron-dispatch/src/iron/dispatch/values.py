"""Per-call values: what a step's parameter words mean.

A step binds each of its operator's per-call members (its dispatch-time
values) to a word of the image's parameter table or to a constant: a
binding is ``(key, word, constant)`` with word -1 for a constant.
`step_values` is the one function that turns a step's words into values;
every backend calls it (the host executables, the cpu backend, the device
runtime's compare mode, the simulated device).

A design declares each runtime parameter by what it carries
(`iron.design.Param(name, member=...)`): a per-call member, or, declared
without one, a value derived from the operator's dispatch-time values by
its `runtime_params(**values)`. `member_params` binds the first kind to the
member's own binding; nothing is matched by name or found by probing the
operator's attributes. `runtime_shaped` is the one test of whether an
operator's values shape its stream (packaging's dispatch-time rule, the
program's steps and the device all ask it).
"""

from __future__ import annotations

from collections.abc import Mapping

from iron.core import Operator
from iron.design import Design

#: (member or parameter, word index or -1, constant)
Binding = tuple[str, int, int]


class BindingError(ValueError):
    """A design parameter that no declaration of its operator supplies."""


def step_values(bindings, words) -> dict[str, int]:
    """The values `bindings` give with the parameter `words` of this call."""
    return {key: int(words[w]) if w >= 0 else c for key, w, c in bindings}


def member_bindings(op: Operator, words, constants) -> tuple[Binding, ...]:
    """Every per-call member of `op`: its word, its constant, else its
    declared default (the field value the reference sees unbound); a
    member left None (no value: Softmax's `valid` over whole rows) is not
    bound at all."""
    bound, fixed = dict(words), dict(constants)
    out = []
    for member in op.per_call_members():
        if member in bound:
            out.append((member, bound[member], 0))
            continue
        value = fixed.get(member, getattr(op, member))
        if value is not None:
            out.append((member, -1, int(value)))
    return tuple(out)


def runtime_shaped(op: Operator) -> bool:
    """Whether `op` is runtime-shaped: its runtime sequence or its design's
    derived parameter words follow its dispatch-time values, so a step of
    it takes a stream generated per values (`iron.dispatch.streams`). It
    declares so by providing `sequence(**values)` (its design's runtime
    sequence at those values) or `runtime_params(**values)` (the derived words); every
    per-call member of such an operator is a dispatch-time value. The one
    meaning of both: packaging's rule, the program's steps and the device
    all ask this."""
    cls = type(op)
    return any(callable(getattr(cls, name, None)) for name in ("sequence", "runtime_params"))


def dispatch_time_members(op: Operator) -> tuple[str, ...]:
    """The per-call members of `op` fixed at dispatch time (see `runtime_shaped`)."""
    return tuple(op.per_call_members()) if runtime_shaped(op) else ()


def derived_params(design: Design) -> tuple[str, ...]:
    """The design's parameters that carry no member: derived per values."""
    return tuple(p for p in design.params if design.member(p) is None)


def member_params(
    op: Operator, design: Design, members: tuple[Binding, ...], where: str
) -> tuple[Binding, ...]:
    """Each member-carrying parameter of `design` bound as its member is;
    a derived one needs the operator's `runtime_params` (checked here)."""
    by_member = {m: (w, c) for m, w, c in members}
    out = []
    for name in design.params:
        member = design.member(name)
        if member is None:
            if not callable(getattr(type(op), "runtime_params", None)):
                raise BindingError(
                    f"{where}: design {design.name} parameter {name!r} declares no member, so "
                    f"it is derived from {type(op).__name__}'s dispatch-time values, but "
                    f"{type(op).__name__} provides no runtime_params(**values)"
                )
            continue
        if member in op.per_call_members() and member not in by_member:
            raise BindingError(
                f"{where}: design {design.name} parameter {name!r} carries "
                f"{type(op).__name__}'s per-call member {member!r}, which this step leaves "
                "unset: bind it to a per-call value or give it one"
            )
        if member not in by_member:
            raise BindingError(
                f"{where}: design {design.name} parameter {name!r} carries member {member!r}, "
                f"which is not a per-call member of {type(op).__name__} "
                f"(per-call members: {', '.join(op.per_call_members()) or 'none'})"
            )
        out.append((name, *by_member[member]))
    return tuple(out)


def design_params(op: Operator, design: Design, values: Mapping[str, int]) -> dict[str, int]:
    """Every parameter word of `design` for `op` at dispatch-time `values`:
    members as given, derived ones from `op.runtime_params(**values)`."""
    derived = derived_params(design)
    words = dict(op.runtime_params(**values)) if derived else {}
    missing = [p for p in derived if p not in words]
    if missing:
        raise BindingError(
            f"{type(op).__name__}: runtime_params gave no {', '.join(missing)} "
            f"(design {design.name} derives them)"
        )
    out = {}
    for name in design.params:
        member = design.member(name)
        out[name] = int(values[member]) if member is not None else int(words[name])
    return out


def per_call_checks(steps) -> list:
    """(operator, its per-call members' defaults, bindings) of each image
    step whose values are bound per call: what `check_calls` validates
    before a call dispatches anything."""
    return [
        (s.op, {m: getattr(s.op, m) for m in s.op.per_call_members()}, s.bindings)
        for s in steps
        if s.words
    ]


def check_calls(checks, words) -> None:
    """Every step's per-call values (unbound ones at their defaults)
    checked by its operator's `check_call` (an `OperatorError` naming the
    operator, value and rule)."""
    for op, defaults, bindings in checks:
        op.check_call(**{**defaults, **step_values(bindings, words)})
