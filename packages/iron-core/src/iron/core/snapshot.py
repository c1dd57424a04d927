"""Spec snapshots: every declared case of every registered operator on each
device, resolved, with its arg specs (or its refusal). A refactor must leave
the snapshot unchanged; `diff` names each case that moved."""

from __future__ import annotations

import enum
import json

import numpy as np

from iron.core import files, registry
from iron.core.capture import capture
from iron.core.conformance import device_names, resolve_on
from iron.core.operator import Composite, Operator, OperatorError
from iron.core.spec import dtype_name

FORMAT = 1
#: far past any catalog's snapshot (every family's is under 1 MiB)
MAX_BYTES = 256 * 2**20


def _plain(value):
    """A JSON-ready spelling of a parameter value."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (np.dtype, type)):
        return dtype_name(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def describe(op: Operator) -> dict:
    """Resolved parameters and specs of one operator (a composite: its parts)."""
    params = {name: _plain(getattr(op, name)) for name in op.parameters()}
    if isinstance(op, Composite):
        with capture(type(op).__name__) as g:
            inputs = [g.input(s.name, s.shape, s.dtype) for s in op.input_specs()]
            op.expand(g, *inputs)
        parts = [
            [
                type(s.op).__name__,
                [[str(n), *spec.describe()[1:]] for n, spec in zip(s.args, s.specs)],
            ]
            for s in g.steps
        ]
        return {
            "params": params,
            "inputs": [s.describe() for s in op.input_specs()],
            "parts": parts,
        }
    return {"params": params, "args": [s.describe() for s in op.arg_specs()]}


def snapshot(family: str | None = None, devices=None) -> dict:
    """Every declared case of the registered operators (of `family`) on
    `devices` (default: every registered device)."""
    devices = tuple(devices or device_names())
    operators = {}
    for entry in registry.operators(family):
        cls = registry.get_operator(entry.name)
        cases = {}
        for case in cls.cases:
            try:
                op = cls(**case.params)
            except OperatorError as error:
                cases[case.label] = {d: {"refused": str(error)} for d in devices}
                continue
            rows = {}
            for device, result in resolve_on(op, devices).items():
                rows[device] = (
                    {"refused": str(result)}
                    if isinstance(result, OperatorError)
                    else describe(result)
                )
            cases[case.label] = rows
        operators[entry.name] = cases
    return {"format": FORMAT, "family": family, "devices": list(devices), "operators": operators}


def write(path, family: str | None = None) -> dict:
    """Snapshot the catalog into `path`, which must be a regular file or
    nothing (checked before any work: a FIFO or a device is refused, never
    written through or replaced, `files.NotRegularFile`), written under a
    private name and renamed: a failure or an interrupt leaves no
    half-written snapshot."""
    files.write_target(path)
    data = snapshot(family)
    with files.replacing(path) as f:
        f.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def diff(old: dict, new: dict) -> list[str]:
    """One line per operator or case that was added, removed or changed."""
    lines = []
    before, after = old.get("operators", {}), new.get("operators", {})
    for name in sorted(set(before) | set(after)):
        if name not in after:
            lines.append(f"{name}: removed")
            continue
        if name not in before:
            lines.append(f"{name}: added")
            continue
        for label in sorted(set(before[name]) | set(after[name])):
            was, now = before[name].get(label), after[name].get(label)
            if was is None or now is None:
                lines.append(f"{name}[{label}]: {'added' if was is None else 'removed'}")
                continue
            for device in sorted(set(was) | set(now)):
                if was.get(device) != now.get(device):
                    lines.append(
                        f"{name}[{label}] on {device}: {_change(was.get(device), now.get(device))}"
                    )
    return lines


def _change(was, now) -> str:
    if was is None or now is None:
        return "added" if was is None else "removed"
    keys = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
    return "; ".join(f"{k} {json.dumps(was.get(k))} -> {json.dumps(now.get(k))}" for k in keys)


class SnapshotError(ValueError):
    """A snapshot file that cannot be read or is not a snapshot."""


def load(path) -> dict:
    """The snapshot at `path`, its shape checked: a JSON object (no key
    twice) with `format` 1, an `operators` mapping (operator -> case ->
    device -> mapping), a `devices` list of names and a `family` name or
    null. A FIFO or a device is refused before it is opened. Raises
    `SnapshotError` naming the file and the rule."""
    try:
        data = files.read_json(path, SnapshotError, limit=MAX_BYTES)
    except FileNotFoundError as error:
        raise SnapshotError(f"{path}: cannot read the snapshot: {error.strerror}") from None
    files.expect(path, "format", data.get("format"), "an integer", error=SnapshotError)
    if data["format"] != FORMAT:
        raise SnapshotError(f"{path}: format {data['format']}: this IRON reads format {FORMAT}")
    operators, devices = data.get("operators", {}), data.get("devices")
    if not isinstance(operators, dict) or not all(
        isinstance(cases, dict)
        and all(isinstance(rows, dict) for rows in cases.values())
        and all(isinstance(row, dict) for rows in cases.values() for row in rows.values())
        for cases in operators.values()
    ):
        raise SnapshotError(f"{path}: 'operators' must map operator -> case -> device -> an object")
    if devices is not None and not (
        isinstance(devices, list) and all(isinstance(d, str) for d in devices)
    ):
        raise SnapshotError(f"{path}: 'devices' must be a list of device names")
    files.expect(path, "family", data.get("family"), "a string", "null", error=SnapshotError)
    return data


def check_file(path) -> list[str]:
    """Differences between the snapshot at `path` and the installed catalog
    (same family filter and devices as recorded in the file)."""
    old = load(path)
    return diff(old, snapshot(old.get("family"), old.get("devices")))
