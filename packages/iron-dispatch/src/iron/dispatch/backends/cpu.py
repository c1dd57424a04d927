"""The cpu backend: the fastest correct run without an NPU. Each step runs
its operator's host kernel where the operator names one (a fused kernel,
bf16 read as bf16, on every core), else its numpy reference, on one host
arena as the reference backend does.

An operator names its host kernel by a class attribute holding an import
path, ``host = "iron.ops.gemm.host:gemv"``: a string, so neither the family
nor this backend imports the other, and the kernel's module (and its JIT)
is imported only when a step that needs it is bound. A kernel is called as
``kernel(op, *arrays, **per_call)`` with every array of the step in the
operator's spec order and writes its outputs (INOUT ones too) in place; a
kernel with a keyword-only ``pool`` parameter also gets the session's
worker threads (`iron.dispatch.host.HostPool`). A kernel that cannot be
imported is logged once and the step runs its reference. A kernel module
may define ``warm_up()``: it is called once per session, when the session
first imports the module. Compiling (or loading) an image starts those
imports in a thread (the session's `iron.dispatch.host.HostKernels`), so a
JIT's import and compile (or cache load), seconds for numba, overlap the
images' building and the weights' upload, whose copies and reads release
the GIL; `CpuExecutable.ready`, which `GraphFunction.load` calls after the
upload, waits for them, so they land in loading, not in the first call.

An operator may also name a kernel for several of its steps at once,
``host_steps = "iron.ops.gemm.host:gemv_steps"``, called as
``kernel(ops, arrays)`` with each step's operator and arrays: consecutive
steps of it without per-call values, none touching what an earlier one of
them writes nor writing what an earlier one reads, run as one call (GEMVs
sharing their x become one parallel launch instead of one each).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from iron.core import Operator
from iron.dispatch.backends import CompilingBackend
from iron.dispatch.executable import BoundStep, FusedExecutable, arguments, kernel
from iron.dispatch.host import HostKernels
from iron.dispatch.values import step_values

log = logging.getLogger("iron.dispatch")

_ATTRIBUTES = ("host", "host_steps")


def _target(op: Operator, attribute: str) -> str | None:
    target = getattr(type(op), attribute, None)
    return target if isinstance(target, str) else None


def host_modules(function) -> set[str]:
    """The modules of the host kernels the steps of a graph function's
    compiled versions name (whatever backend compiled them)."""
    ops = (step.op for version in function.versions.values() for step in version.runlist.steps)
    targets = (_target(op, attribute) for op in ops for attribute in _ATTRIBUTES)
    return {target.partition(":")[0] for target in targets if target is not None}


def start_imports(kernels: HostKernels, op: Operator) -> None:
    """Start importing (and warming up) the modules of `op`'s host kernels."""
    for attribute in _ATTRIBUTES:
        target = _target(op, attribute)
        if target is not None:
            kernels.start(target)


def host_kernel(kernels: HostKernels, op: Operator, attribute: str = "host") -> Callable | None:
    """The host kernel `op`'s class names in `attribute` (waiting for its
    import); None when it names none or it cannot be imported (then the
    reference runs)."""
    target = _target(op, attribute)
    return None if target is None else kernels.kernel(target)


@attrs.define
class HostStep(BoundStep):
    """A step run by a host kernel, which writes its outputs in place."""

    def __call__(self, words) -> None:
        self.run(*self.arrays, **step_values(self.bindings, words))


@attrs.define
class HostSteps(BoundStep):
    """Consecutive steps run by their operators' `host_steps` kernel at once."""

    members: list[BoundStep] = attrs.field(factory=list)

    def __call__(self, words) -> None:
        self.run([m.step.op for m in self.members], [m.arrays for m in self.members])


def _together(kernels: HostKernels, steps: list[BoundStep]) -> list[BoundStep]:
    """`steps` with each run that one `host_steps` kernel can take at once
    (see the module docstring) as one HostSteps."""
    out: list[BoundStep] = []
    run: list[BoundStep] = []

    def close():
        if len(run) > 1:
            first = run[0]
            fn = host_kernel(kernels, first.step.op, "host_steps")
            out.append(HostSteps(first.index, first.step, fn, [], (), list(run)))
        else:
            out.extend(run)
        run.clear()

    for step in steps:
        target = getattr(type(step.step.op), "host_steps", None)
        member = (
            target is not None
            and isinstance(step, HostStep)
            and not step.bindings
            and host_kernel(kernels, step.step.op, "host_steps") is not None
        )
        if not member:
            close()
            out.append(step)
            continue
        if run and (target != run[0].step.op.host_steps or not _independent(run, step)):
            close()
        run.append(step)
    close()
    return out


def _independent(run: list[BoundStep], step: BoundStep) -> bool:
    """True when `step` reads nothing `run` writes and writes nothing it
    reads or writes: then they may run in any order."""

    def ranges(s, indices):
        return [(p.arena, p.offset, p.offset + p.nbytes) for p in (s.step.args[i] for i in indices)]

    def meet(xs, ys):
        return any(a == b and lo < hi2 and lo2 < hi for a, lo, hi in xs for b, lo2, hi2 in ys)

    reads, writes = ranges(step, step.step.reads), ranges(step, step.step.writes)
    for earlier in run:
        before = ranges(earlier, earlier.step.writes)
        if (
            meet(before, reads)
            or meet(before, writes)
            or meet(ranges(earlier, earlier.step.reads), writes)
        ):
            return False
    return True


def _host_run(op: Operator, fn: Callable) -> Callable:
    defaults = {m: getattr(op, m) for m in op.per_call_members()}

    def run(*arrays, **values):
        fn(op, *arrays, **{**defaults, **values})

    return run


class CpuExecutable(FusedExecutable):
    """Fused, on unified memory: host kernels where operators have them."""

    def __init__(self, image, buffers, *, kernels: HostKernels, poison) -> None:
        super().__init__(image, buffers, device_model=False, poison=poison)
        self.kernels = kernels
        for step in image.steps:
            start_imports(kernels, step.op)

    def ready(self, status=None) -> None:
        """Wait for the host kernels' imports and warm-ups; `status(text)`
        hears what they are doing while they last (see `HostKernels.wait`)."""
        for step in self.image.steps:
            for attribute in _ATTRIBUTES:
                target = _target(step.op, attribute)
                if target is not None:
                    self.kernels.wait(target, status)
                    self.kernels.kernel(target)

    def steps(self) -> list[BoundStep]:
        generation = self.buffers["scratch"].generation
        if generation != self._generation:
            bound = [self._bind(i, step) for i, step in enumerate(self.image.steps)]
            self._steps = _together(self.kernels, bound)
            self._generation = generation
        return self._steps

    def _bind(self, index, step) -> BoundStep:
        arrays = arguments(step, self.buffers)
        fn = host_kernel(self.kernels, step.op)
        if fn is None:
            return BoundStep(index, step, kernel(step.op, False), arrays, step.bindings)
        return HostStep(index, step, _host_run(step.op, fn), arrays, step.bindings)


class CpuBackend(CompilingBackend):
    name = "cpu"
    unified = True
    modes = ("fused",)

    def __init__(self, session) -> None:
        super().__init__(session)
        self.kernels: HostKernels = session.host

    def available(self) -> tuple[bool, str]:
        return True, "runs wherever numpy does; host kernels compile with numba"

    def compile(self, runlist, layout, mode="fused", flags=(), **kwargs):
        for step in runlist.steps:  # the JIT's import overlaps building the image too
            start_imports(self.kernels, step.op)
        return super().compile(runlist, layout, mode, flags, **kwargs)

    def load(self, image, buffers, *, device=None, poison=False) -> CpuExecutable:
        self.check_mode(image.mode)
        return CpuExecutable(image, buffers, kernels=self.kernels, poison=poison)
