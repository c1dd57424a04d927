"""The checks every operator in every family passes, ours or a third party's.

For each declared case: the operator constructs without a device and
resolves on at least one registered device (a refusal must be an
`OperatorError` naming the operator); its arg specs agree with what its
reference actually takes and returns (count, shape, dtype); the reference is
deterministic and leaves its inputs alone; its tolerance is a `Tolerance`,
with and without the inputs;
its identity is stable text. A composite's expansion records with every part
constructible and every shape chaining. Separately, each operator's module
imports alone, as in a fresh interpreter (`check_importable_alone`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import attrs
import numpy as np

from iron.core import registry
from iron.core.capture import capture
from iron.core.device import Device
from iron.core.operator import Case, Composite, Operator, OperatorError
from iron.core.spec import dtype_name
from iron.core.tolerance import Tolerance


class ConformanceError(AssertionError):
    pass


@attrs.frozen
class ConformanceCase:
    name: str
    cls: type
    case: Case | None

    def __str__(self) -> str:
        return f"{self.name}[{self.case.label if self.case else 'no cases'}]"


def catalog_cases(family: str | None = None) -> list[ConformanceCase]:
    """One entry per declared case of every registered operator (of `family`).
    An operator that declares no case yields one entry that fails."""
    out = []
    for entry in registry.operators(family):
        cls = registry.get_operator(entry.name)
        out += [ConformanceCase(entry.name, cls, c) for c in cls.cases] or [
            ConformanceCase(entry.name, cls, None)
        ]
    return out


def device_names() -> list[str]:
    """The registered devices (npu1, npu2 and any a plugin adds), by name."""
    return sorted(registry.devices())


def resolve_on(op: Operator, devices=None) -> dict[str, Operator | OperatorError]:
    """`op` resolved on each named device (default: every registered one),
    or the refusal it raised."""
    results: dict[str, Operator | OperatorError] = {}
    for name in devices or device_names():
        try:
            results[name] = op.resolve(Device.from_name(name))
        except OperatorError as refusal:
            results[name] = refusal
    return results


def check(item: ConformanceCase, devices=None) -> None:
    """Raise `ConformanceError` explaining the first broken promise."""
    if item.case is None:
        raise ConformanceError(
            f"{item.name} declares no test cases (set `cases = (Case({{...}}),)`)"
        )
    where = str(item)
    try:
        op = item.cls(**item.case.params)
    except OperatorError as error:
        raise ConformanceError(f"{where}: a declared case is refused: {error}") from error
    resolved = resolve_on(op, devices)
    for device, result in resolved.items():
        if isinstance(result, OperatorError) and item.cls.__name__ not in str(result):
            raise ConformanceError(
                f"{where} on {device}: refusal does not name the operator: {result}"
            )
    usable = {d: r for d, r in resolved.items() if isinstance(r, Operator)}
    if not usable:
        raise ConformanceError(f"{where}: refused on every device: {resolved}")
    for device, resolved_op in usable.items():
        label = f"{where} on {device}"
        _check_identity(label, resolved_op)
        if isinstance(resolved_op, Composite):
            _check_expansion(label, resolved_op)
        else:
            _check_reference(label, resolved_op, Device.from_name(device))


def _check_identity(label: str, op: Operator) -> None:
    try:
        first, second = op.identity(), op.identity()
    except OperatorError as error:
        raise ConformanceError(f"{label}: identity: {error}") from error
    if first != second:
        raise ConformanceError(f"{label}: identity is not stable")


def _check_expansion(label: str, op: Composite) -> None:
    with capture(f"{type(op).__name__}") as g:
        inputs = [g.input(s.name, s.shape, s.dtype) for s in op.input_specs()]
        try:
            op.expand(g, *inputs)
        except (OperatorError, ValueError, TypeError) as error:
            raise ConformanceError(f"{label}: expansion does not record: {error}") from error
    if not g.steps:
        raise ConformanceError(f"{label}: expansion recorded no step")


def _check_reference(label: str, op: Operator, device: Device) -> None:
    specs = op.arg_specs()
    reads = [s for s in specs if s.reads]
    writes = [s for s in specs if s.writes]
    inputs = op.example_inputs(np.random.default_rng(0))
    if len(inputs) != len(reads):
        raise ConformanceError(
            f"{label}: example_inputs gave {len(inputs)} arrays for {len(reads)} read specs"
        )
    for spec, array in zip(reads, inputs):
        if array.shape != spec.shape or array.dtype != spec.dtype:
            raise ConformanceError(
                f"{label}: input {spec.name} is {array.shape} {dtype_name(array.dtype)}; "
                f"spec says {spec.shape} {dtype_name(spec.dtype)}"
            )
    kept = [a.copy() for a in inputs]
    first = op.call_reference(*inputs)
    for array, original in zip(inputs, kept):
        if array.tobytes() != original.tobytes():
            raise ConformanceError(f"{label}: reference modified one of its inputs")
    if len(first) != len(writes):
        raise ConformanceError(
            f"{label}: reference returned {len(first)} arrays; the spec writes {len(writes)}"
        )
    for spec, array in zip(writes, first):
        array = np.asarray(array)
        if array.shape != spec.shape or array.dtype != spec.dtype:
            raise ConformanceError(
                f"{label}: reference output {spec.name} is {array.shape} {dtype_name(array.dtype)}; "
                f"spec says {spec.shape} {dtype_name(spec.dtype)}"
            )
    second = op.call_reference(*kept)
    for spec, a, b in zip(writes, first, second):
        if np.asarray(a).tobytes() != np.asarray(b).tobytes():
            raise ConformanceError(
                f"{label}: reference output {spec.name} differs between two identical calls"
            )
    for given in (None, kept):
        try:
            tolerance = op.tolerance(device, inputs=given)
        except TypeError as error:
            raise ConformanceError(
                f"{label}: tolerance(device, *, inputs=None) must take the inputs a device read: {error}"
            ) from error
        if not isinstance(tolerance, Tolerance):
            raise ConformanceError(f"{label}: tolerance() returned {tolerance!r}, not a Tolerance")


#: Run by one interpreter for a whole list of modules: it imports iron.core
#: (what importing any family does first), then forks a child per module, so
#: each module is imported with no other family module loaded before it, as
#: in a fresh interpreter, without paying an interpreter's start per module.
#: Prints a JSON list: per target, its traceback, or null where it imported.
_IMPORT_PROBE = """
import importlib, json, os, sys, traceback
import iron.core
failed = []
for module, attribute in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            getattr(importlib.import_module(module), attribute)
        except BaseException:
            os.write(write, traceback.format_exc().encode())
            os._exit(1)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        told = pipe.read().decode()
    died = os.waitpid(pid, 0)[1]
    failed.append((told.strip() or "the importing process died") if died else None)
print(json.dumps(failed))
"""


def check_importable_alone(*names: str) -> None:
    """The module behind each registered operator of `names` imports with no
    other operator module loaded before it, as in a fresh interpreter, and
    holds the class. One interpreter probes them all (a child forked per
    module); where there is no fork, each gets an interpreter of its own."""
    targets = [registry.operator_entry(name).target.partition(":")[::2] for name in names]
    if hasattr(os, "fork"):
        probe = subprocess.run(
            [sys.executable, "-c", _IMPORT_PROBE, json.dumps(targets)],
            capture_output=True,
            text=True,
        )
        if probe.returncode:
            raise ConformanceError(f"the import probe failed:\n{probe.stderr.strip()}")
        failed = json.loads(probe.stdout.splitlines()[-1])  # the last line: a module may print
    else:
        failed = []
        for module, attribute in targets:
            code = f"import importlib; getattr(importlib.import_module({module!r}), {attribute!r})"
            alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            failed.append(alone.stderr.strip() if alone.returncode else None)
    broken = [
        f"{name}: {module} does not import alone:\n{told}"
        for name, (module, _), told in zip(names, targets, failed)
        if told is not None
    ]
    if broken:
        raise ConformanceError("\n".join(broken))


def modules_imported_by(code: str, prefix: str = "iron") -> set[str]:
    """Modules under `prefix` that `code` leaves imported, measured in a fresh
    interpreter (this process's sys.modules is polluted by the test run)."""
    probe = (
        f"{code}\nimport sys\n"
        f"print('\\n'.join(m for m in sys.modules if m == {prefix!r} or m.startswith({prefix!r} + '.')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"probe failed:\n{result.stderr}")
    return set(result.stdout.split())
