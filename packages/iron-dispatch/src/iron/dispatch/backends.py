"""Backends: how a sequence becomes an image and how an image runs.

    backend.compile(sequence, mode) -> Image         (through the compile cache)
    backend.load(image, buffers) -> Executable       (executable(values) runs once)

- ``reference``: the host. Each step runs its operator's numpy reference on
  views into one byte arena per layout arena, at the planned offsets, so a
  planning bug that aliases two live buffers gives wrong numbers.
- ``sim``: a simulated NPU with the device's memory semantics: device
  memory apart from the host mirror, explicit syncs a granule at a time,
  per-call values through a 32-word parameter scratchpad (fused), one
  dispatch per step with host syncs around the chain (separate), and a
  per-step judge against the reference (compare). Steps run the operator's
  ``simulate`` (a model of its device kernel) where it defines one.
- ``npu``: mlir-aie lowering, aiecc and XRT. Where any of those is missing it
  says which, and how to get it.
"""

from __future__ import annotations

import logging
import time

import attrs
import numpy as np

from iron.core import compare, environment
from iron.dispatch import image as images
from iron.dispatch.cache import CompileCache, digest
from iron.dispatch.layout import Layout
from iron.dispatch.memory import DeviceBuffer
from iron.dispatch.runlist import Runlist

log = logging.getLogger("iron.dispatch")

MODES = ("fused", "separate", "compare")


class BackendUnavailable(RuntimeError):
    """The chosen backend cannot run on this host."""


@attrs.frozen
class StepReport:
    """Compare mode's judgement of one step (each on the device's own inputs)."""

    index: int
    operator: str
    output: str
    max_abs: float
    max_rel: float
    passed: bool
    detail: str


class Executable:
    """One loaded image: call it with the per-call values to run once.

    The caller writes inputs into ``buffers["input"].host`` and reads outputs
    from ``buffers["output"].host``; the executable moves bytes between host
    and device as the image's dispatch mode does on the NPU."""

    #: per-call values reach the device through the parameter scratchpad (a
    #: full ELF); otherwise they are dispatch scalars (an xclbin chain)
    scratchpad = True
    #: after the run the host pulls back every non-input buffer
    pulls_back_scratch = False

    def __init__(
        self,
        image: images.Image,
        buffers: dict[str, DeviceBuffer],
        *,
        device_model: bool,
        poison: bool,
    ) -> None:
        self.image, self.buffers, self.poison = image, buffers, poison
        self.device_model = device_model
        unified = buffers["input"].unified
        self.parameters = DeviceBuffer(
            8 * max(1, len(image.parameters)), unified=unified, name=f"{image.name}.parameters"
        )
        self._generation = None
        self._steps: list[images.BoundStep] = []
        self.reports: list[StepReport] = []

    def steps(self) -> list[images.BoundStep]:
        """Bound steps, rebuilt when the shared arena has grown."""
        generation = self.buffers["scratch"].generation
        if generation != self._generation:
            memory = {arena: buffer.device for arena, buffer in self.buffers.items()}
            self._steps = images.bind(self.image, memory, self.device_model)
            self._generation = generation
        return self._steps

    def _poison(self) -> None:
        self.buffers["scratch"].poison(self.image.transients)
        self.buffers["output"].poison([(0, self.buffers["output"].nbytes)])

    def _words(self, values: dict[str, int]) -> np.ndarray:
        """Write the parameter scratchpad and sync it; the device reads it."""
        if not self.image.parameters:
            return self.parameters.device.view(np.int64)
        words = self.parameters.host.view(np.int64)
        words[: len(self.image.parameters)] = images.evaluate(self.image.parameters, values)
        self.parameters.sync_to_device()
        return self.parameters.device.view(np.int64)

    def __call__(self, values: dict[str, int]) -> None:
        steps = self.steps()
        self.buffers["input"].sync_to_device()
        if self.scratchpad:
            words = self._words(values)
        else:
            words = images.evaluate(self.image.parameters, values)
        if self.poison:
            self._poison()
        self.run(steps, words)
        self.buffers["output"].sync_from_device()
        if self.pulls_back_scratch:
            self.buffers["scratch"].sync_from_device()

    def run(self, steps: list[images.BoundStep], words) -> None:
        for step in steps:
            step(words)


class SeparateExecutable(Executable):
    """One dispatch per step; per-call values are dispatch scalars; after the
    chain the host pulls back every non-input buffer (as IRON's xclbin chain
    does)."""

    scratchpad = False
    pulls_back_scratch = True


class CompareExecutable(SeparateExecutable):
    """Separate dispatch, each step judged against the operator's reference
    on the inputs the device actually had, with the operator's tolerance.
    Errors do not accumulate: every step starts from the device's state."""

    def __init__(self, image, buffers, *, device_model, poison, device) -> None:
        super().__init__(image, buffers, device_model=device_model, poison=poison)
        self.device = device
        self._references = [images.kernel(s.op, use_device_model=False) for s in image.steps]

    def run(self, steps: list[images.BoundStep], words) -> None:
        self.reports = []
        for step, reference in zip(steps, self._references):
            spec = step.step
            inputs = [step.arrays[i].copy() for i in spec.reads]  # read back from the device
            step(words)
            call_values = {m: int(words[w]) for m, w in spec.words} | step.constants
            expected = reference(*inputs, **call_values)
            tolerance = spec.op.tolerance(self.device)
            for i, want in zip(spec.writes, expected):
                verdict = compare(step.arrays[i], want, tolerance, name=str(spec.names[i]))
                self.reports.append(
                    StepReport(step.index, type(spec.op).__name__, str(spec.names[i]), verdict.max_abs,
                               verdict.max_rel, verdict.passed, verdict.detail)
                )  # fmt: skip
                if not verdict.passed:
                    log.warning(
                        "%s step %d (%s): %s",
                        self.image.name,
                        step.index,
                        type(spec.op).__name__,
                        verdict.detail,
                    )


class Backend:
    """The protocol every backend follows; registered through the
    ``iron_register_backends`` hook."""

    name = "backend"
    unified = False  # host and device share one set of bytes
    modes: tuple[str, ...] = MODES
    max_words: int | None = None

    def __init__(self, cache: CompileCache | None = None) -> None:
        self.cache = cache
        self.hits = self.misses = 0

    def available(self) -> tuple[bool, str]:
        return True, "always"

    def compile(
        self, runlist: Runlist, layout: Layout, mode: str = "fused", flags=()
    ) -> images.Image:
        if mode not in self.modes:
            raise ValueError(
                f"backend {self.name!r} has no mode {mode!r} (modes: {', '.join(self.modes)})"
            )
        ok, why = self.available()
        if not ok:
            raise BackendUnavailable(f"backend {self.name!r} is not available here: {why}")
        parts = {
            "backend": self.name,
            "mode": mode,
            "flags": sorted(flags),
            "device": runlist.device.key if runlist.device else None,
        }
        key = digest(images.key_text(runlist, layout, parts))
        cache = self.cache or CompileCache()
        started = time.perf_counter()
        data, hit = cache.get_or_build(
            key,
            lambda: self.build(runlist, layout, mode, flags).to_bytes(),
            backend=self.name, mode=mode, name=runlist.name,
        )  # fmt: skip
        self.hits += hit
        self.misses += not hit
        log.debug(
            "%s: %s image %s (%.1f ms)",
            runlist.name,
            "cached" if hit else "compiled",
            key[:12],
            1e3 * (time.perf_counter() - started),
        )
        return images.Image.from_bytes(data)

    def build(self, runlist: Runlist, layout: Layout, mode: str, flags) -> images.Image:
        return images.build(
            runlist, layout, backend=self.name, mode=mode, flags=flags, max_words=self.max_words
        )

    def load(
        self,
        image: images.Image,
        buffers: dict[str, DeviceBuffer],
        *,
        device=None,
        poison: bool = False,
    ) -> Executable:
        raise NotImplementedError


class ReferenceBackend(Backend):
    name = "reference"
    unified = True
    modes = MODES  # one host: every mode runs the same way

    def load(self, image, buffers, *, device=None, poison=False) -> Executable:
        return Executable(image, buffers, device_model=False, poison=poison)


class SimBackend(Backend):
    name = "sim"
    max_words = images.PARAMETER_WORDS

    def load(self, image, buffers, *, device=None, poison=False) -> Executable:
        if image.mode == "fused":
            return Executable(image, buffers, device_model=True, poison=poison)
        if image.mode == "separate":
            return SeparateExecutable(image, buffers, device_model=True, poison=poison)
        return CompareExecutable(image, buffers, device_model=True, poison=poison, device=device)

    def build(self, runlist, layout, mode, flags):
        # separate and compare dispatch step by step: per-call values are
        # dispatch scalars there, so only the fused image has the 32-word limit
        max_words = self.max_words if mode == "fused" else None
        return images.build(
            runlist, layout, backend=self.name, mode=mode, flags=flags, max_words=max_words
        )


class NpuBackend(Backend):
    name = "npu"

    def available(self) -> tuple[bool, str]:
        probes = [environment.mlir_aie(), environment.pyxrt(), environment.npu_device()]
        missing = [p for p in probes if not p.present]
        if missing:
            return False, "; ".join(
                f"{p.name} is missing ({p.detail}): {p.how_to_get}" for p in missing
            )
        return (
            False,
            "mlir-aie, pyxrt and an NPU are present, but IRON's mlir-aie lowering is not built yet",
        )

    def load(self, image, buffers, *, device=None, poison=False) -> Executable:
        raise BackendUnavailable(f"backend 'npu' is not available here: {self.available()[1]}")


def make_reference() -> Backend:
    return ReferenceBackend()


def make_sim() -> Backend:
    return SimBackend()


def make_npu() -> Backend:
    return NpuBackend()
