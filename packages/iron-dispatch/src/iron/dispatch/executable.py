"""Running an image on the host (the reference backend, and backends
built like it): its buffers, its steps bound to typed views of them, and
the executables of two dispatch modes.

- fused (`FusedExecutable`): one run over the whole runlist; inputs synced
  before it and outputs after; per-call values through the parameter
  scratchpad, written and synced before each run;
- separate (`SeparateExecutable`): one dispatch per step, per-call values as
  dispatch scalars, every non-input buffer pulled back after the chain.

The device backends (sim, npu) run images through `iron.dispatch.runtime`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs
import numpy as np

from iron.core import Operator
from iron.core.capture import Expr
from iron.dispatch.image import Image, ImageStep
from iron.dispatch.memory import DeviceBuffer
from iron.dispatch.values import check_calls, per_call_checks, step_values


def allocate(
    image: Image, *, granule: int, unified: bool, scratch: DeviceBuffer | None = None
) -> dict[str, DeviceBuffer]:
    """Fresh input and output buffers for `image` (and scratch, unless shared)."""
    buffers = {
        arena: DeviceBuffer(
            image.sizes[arena], granule=granule, unified=unified, name=f"{image.name}.{arena}"
        )
        for arena in ("input", "output")
    }
    buffers["scratch"] = scratch or DeviceBuffer(
        image.sizes["scratch"], granule=granule, unified=unified, name=f"{image.name}.scratch"
    )
    for arena, table in (("input", image.inputs), ("output", image.outputs)):
        for name, offset, nbytes in table:
            buffers[arena].register(name, offset, nbytes)
    for name, offset, nbytes in image.residents:
        buffers["scratch"].register(name, offset, nbytes)
    return buffers


# ---- steps bound to memory ------------------------------------------------------


def kernel(op: Operator, use_device_model: bool) -> Callable:
    """How one step computes: the operator's `simulate` (its model of the
    device kernel) or its `reference`. Unbound per-call members take their
    field values; the result is always a tuple."""
    # an operator without a model of its own simulates with its reference:
    # call that directly, one call less on every step
    modelled = use_device_model and type(op).simulate is not Operator.simulate
    fn = op.simulate if modelled else op.reference
    defaults = {m: getattr(op, m) for m in op.per_call_members()}

    def run(*arrays, **values):
        out = fn(*arrays, **{**defaults, **values})
        return out if isinstance(out, tuple) else (out,)

    return run


@attrs.define
class BoundStep:
    index: int
    step: ImageStep
    run: Callable
    arrays: list[np.ndarray]
    bindings: tuple[tuple[str, int, int], ...]

    def values(self, words) -> dict[str, int]:
        """This step's per-call values, read from the parameter words."""
        return step_values(self.bindings, words)

    def __call__(self, words) -> None:
        step = self.step
        outputs = self.run(
            *(self.arrays[i] for i in step.reads), **step_values(self.bindings, words)
        )
        for i, out in zip(step.writes, outputs):
            self.arrays[i][...] = out


def bind(image: Image, buffers: dict[str, DeviceBuffer], use_device_model: bool) -> list[BoundStep]:
    """Steps with typed views into the device side of `buffers` ready to run."""
    bound = []
    for index, step in enumerate(image.steps):
        arrays = arguments(step, buffers)
        bound.append(
            BoundStep(index, step, kernel(step.op, use_device_model), arrays, step.bindings)
        )
    return bound


def arguments(step, buffers: dict[str, DeviceBuffer]) -> list[np.ndarray]:
    """A step's arrays: typed views of its buffers' device sides (of bytes
    held in place where a weight is read where it lies)."""
    return [buffers[p.arena].typed(p.offset, p.nbytes, p.dtype, p.shape) for p in step.args]


def evaluate(parameters: tuple[Expr, ...], values: Mapping[str, int]) -> np.ndarray:
    return np.array([e.evaluate(values) for e in parameters], dtype=np.int64)


# ---- executables ----------------------------------------------------------------


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


class FusedExecutable:
    """One loaded image, fused: call it with the per-call values to run once.

    The caller writes inputs into ``buffers["input"].host`` and reads outputs
    from ``buffers["output"].host``; the executable moves bytes between host
    and device as the image's dispatch mode does on the NPU. `device_model`:
    steps run their operator's `simulate` instead of its `reference`;
    `poison`: transients and outputs are NaN bytes before every run."""

    #: per-call values reach the device through the parameter scratchpad (a
    #: full ELF); otherwise they are dispatch scalars (an xclbin chain)
    scratchpad = True
    #: after the run the host pulls back every non-input buffer
    pulls_back_scratch = False

    def __init__(
        self, image: Image, buffers: dict[str, DeviceBuffer], *, device_model: bool, poison: bool
    ) -> None:
        self.image, self.buffers, self.poison = image, buffers, poison
        self.device_model = device_model
        unified = buffers["input"].unified
        self.parameters = DeviceBuffer(
            8 * max(1, len(image.parameters)), unified=unified, name=f"{image.name}.parameters"
        )
        self._generation = None
        self._steps: list[BoundStep] = []
        self._checks = per_call_checks(image.steps)
        self.reports: list[StepReport] = []

    def steps(self) -> list[BoundStep]:
        """Bound steps, rebuilt when the shared arena has grown."""
        generation = self.buffers["scratch"].generation
        if generation != self._generation:
            self._steps = bind(self.image, self.buffers, self.device_model)
            self._generation = generation
        return self._steps

    def _poison(self) -> None:
        self.buffers["scratch"].poison(self.image.transients)
        self.buffers["output"].poison([(0, self.buffers["output"].nbytes)])

    def _words(self, values: Mapping[str, int]) -> np.ndarray:
        """Write the parameter scratchpad and sync it; the device reads it."""
        if not self.image.parameters:
            return self.parameters.device.view(np.int64)
        words = self.parameters.host.view(np.int64)
        words[: len(self.image.parameters)] = evaluate(self.image.parameters, values)
        self.parameters.sync_to_device()
        return self.parameters.device.view(np.int64)

    def __call__(self, values: Mapping[str, int]) -> None:
        if self._checks:  # nothing moves before every step's values are checked
            check_calls(self._checks, evaluate(self.image.parameters, values))
        steps = self.steps()
        self.buffers["input"].sync_to_device()
        if self.scratchpad:
            words = self._words(values)
        else:
            words = evaluate(self.image.parameters, values)
        if self.poison:
            self._poison()
        self.run(steps, words)
        self.buffers["output"].sync_from_device()
        if self.pulls_back_scratch:
            self.buffers["scratch"].sync_from_device()

    def run(self, steps: list[BoundStep], words) -> None:
        for step in steps:
            step(words)


class SeparateExecutable(FusedExecutable):
    """One dispatch per step; per-call values are dispatch scalars; after the
    chain the host pulls back every non-input buffer (as IRON's xclbin chain
    does)."""

    scratchpad = False
    pulls_back_scratch = True
