"""The cpu backend: the fastest correct run without an NPU. Each step runs
its operator's host kernel where the operator names one (a fused kernel,
bf16 read as bf16, on every core), else its numpy reference, on one host
arena as the reference backend does.

An operator names its host kernel by a class attribute holding an import
path, ``host = "iron.ops.gemm.host:gemv"``: a string, so neither the family
nor this backend imports the other, and the kernel's module (and its JIT)
is imported only when a step that needs it is bound. A kernel is called as
``kernel(op, *arrays, **per_call)`` with every array of the step in the
operator's spec order and writes its outputs (INOUT ones too) in place.
A kernel that cannot be imported is logged once and the step runs its
reference. A kernel module may define ``warm_up()``: it is called once,
when the module is first imported. Compiling (or loading) an image
starts those imports in a thread, so a JIT's import and compile (or cache
load), seconds for numba, overlap the images' building and the weights'
upload, whose copies and reads release the GIL; `CpuExecutable.ready`,
which `GraphFunction.load` calls after the upload, waits for them, so
they land in loading, not in the first call.

An operator may also name a kernel for several of its steps at once,
``host_steps = "iron.ops.gemm.host:gemv_steps"``, called as
``kernel(ops, arrays)`` with each step's operator and arrays: consecutive
steps of it without per-call values, none touching what an earlier one of
them writes nor writing what an earlier one reads, run as one call (GEMVs
sharing their x become one parallel launch instead of one each).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future

import attrs

from iron.core import Operator
from iron.dispatch.backends import CompilingBackend
from iron.dispatch.executable import BoundStep, FusedExecutable, kernel
from iron.dispatch.memory import view

log = logging.getLogger("iron.dispatch")

_kernels: dict[str, Callable | None] = {}
_modules: dict[str, Future] = {}  # kernel module -> its import and warm-up
_modules_lock = threading.Lock()
_ATTRIBUTES = ("host", "host_steps")


def _target(op: Operator, attribute: str) -> str | None:
    target = getattr(type(op), attribute, None)
    return target if isinstance(target, str) else None


def start_imports(op: Operator) -> None:
    """Start importing (and warming up) the modules of `op`'s host kernels,
    each once, in a thread; `host_kernel` waits for them."""
    for attribute in _ATTRIBUTES:
        target = _target(op, attribute)
        if target is not None:
            _module(target.partition(":")[0])


def _module(module: str) -> Future:
    with _modules_lock:
        if module not in _modules:
            future = _modules[module] = Future()
            # not a daemon: exiting mid-import could stop the JIT inside native code
            threading.Thread(target=_import, args=(module, future), name=f"import {module}").start()
        return _modules[module]


def _import(module: str, future: Future) -> None:
    try:
        loaded = importlib.import_module(module)
        if callable(getattr(loaded, "warm_up", None)):
            log.info("host kernels of %s ready: %s", module, loaded.warm_up())
    except BaseException as error:  # raised again in the thread that waits for it
        future.set_exception(error)
    else:
        future.set_result(loaded)


def host_kernel(op: Operator, attribute: str = "host") -> Callable | None:
    """The host kernel `op`'s class names in `attribute`, imported once
    (waiting for an import already started); None when it names none or it
    cannot be imported (then the reference runs)."""
    target = _target(op, attribute)
    if target is None:
        return None
    if target not in _kernels:
        module, _, name = target.partition(":")
        try:
            _kernels[target] = getattr(_module(module).result(), name)
        except (ImportError, AttributeError) as error:
            log.warning("host kernel %s cannot be imported (%s); running references", target, error)
            _kernels[target] = None
    return _kernels[target]


@attrs.define
class HostStep(BoundStep):
    """A step run by a host kernel, which writes its outputs in place."""

    def __call__(self, words) -> None:
        values = {member: int(words[w]) for member, w in self.step.words}
        values.update(self.constants)
        self.run(*self.arrays, **values)


@attrs.define
class HostSteps(BoundStep):
    """Consecutive steps run by their operators' `host_steps` kernel at once."""

    members: list[BoundStep] = attrs.field(factory=list)

    def __call__(self, words) -> None:
        self.run([m.step.op for m in self.members], [m.arrays for m in self.members])


def _together(steps: list[BoundStep]) -> list[BoundStep]:
    """`steps` with each run that one `host_steps` kernel can take at once
    (see the module docstring) as one HostSteps."""
    out: list[BoundStep] = []
    run: list[BoundStep] = []

    def close():
        if len(run) > 1:
            first = run[0]
            fn = host_kernel(first.step.op, "host_steps")
            out.append(HostSteps(first.index, first.step, fn, [], {}, list(run)))
        else:
            out.extend(run)
        run.clear()

    for step in steps:
        target = getattr(type(step.step.op), "host_steps", None)
        member = (
            target is not None
            and isinstance(step, HostStep)
            and not step.step.words
            and not step.constants
            and host_kernel(step.step.op, "host_steps") is not None
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

    def __init__(self, image, buffers, *, device_model, poison) -> None:
        super().__init__(image, buffers, device_model=device_model, poison=poison)
        for step in image.steps:
            start_imports(step.op)

    def ready(self) -> None:
        """Wait for the host kernels' imports and warm-ups."""
        for step in self.image.steps:
            for attribute in _ATTRIBUTES:
                host_kernel(step.op, attribute)

    def steps(self) -> list[BoundStep]:
        generation = self.buffers["scratch"].generation
        if generation != self._generation:
            memory = {arena: buffer.device for arena, buffer in self.buffers.items()}
            bound = [self._bind(i, step, memory) for i, step in enumerate(self.image.steps)]
            self._steps = _together(bound)
            self._generation = generation
        return self._steps

    @staticmethod
    def _bind(index, step, memory) -> BoundStep:
        arrays = [view(memory[p.arena], p.offset, p.nbytes, p.dtype, p.shape) for p in step.args]
        fn = host_kernel(step.op)
        if fn is None:
            return BoundStep(index, step, kernel(step.op, False), arrays, dict(step.constants))
        return HostStep(index, step, _host_run(step.op, fn), arrays, dict(step.constants))


class CpuBackend(CompilingBackend):
    name = "cpu"
    unified = True
    modes = ("fused",)

    def available(self) -> tuple[bool, str]:
        return True, "runs wherever numpy does; host kernels compile with numba"

    def compile(self, runlist, layout, mode="fused", flags=(), **kwargs):
        for step in runlist.steps:  # the JIT's import overlaps building the image too
            start_imports(step.op)
        return super().compile(runlist, layout, mode, flags, **kwargs)

    def load(self, image, buffers, *, device=None, poison=False) -> CpuExecutable:
        self.check_mode(image.mode)
        return CpuExecutable(image, buffers, device_model=False, poison=poison)
