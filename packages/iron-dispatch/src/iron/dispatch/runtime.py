"""The device runtime: an image's programs run through the XRT seam
(`iron.dispatch.xrt`), the same code over pyxrt (npu) and over the
simulated device (sim).

Per program (one when fused, one per step when separate): the ELF is loaded
into a hardware context, its kernel ``main:sequence`` gets one run whose
arguments are the consolidated buffer objects (input, output, scratch, and
the trace buffer when traced). A call syncs the inputs to the device,
writes the per-call words into each run's control scratchpad and syncs it,
starts and waits each run, and syncs the outputs back; separate dispatch
then pulls back every non-input buffer, as IRON's xclbin chain does.
Compare mode is separate dispatch that judges each step against its
operator's reference on the bytes the device had before the step.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import attrs
import numpy as np

from iron.core import Device, compare, files
from iron.design import ELF_KERNEL
from iron.dispatch.executable import StepReport, evaluate, kernel
from iron.dispatch.image import Image
from iron.dispatch.memory import DeviceBuffer, view
from iron.dispatch.values import check_calls, per_call_checks, step_values

log = logging.getLogger("iron.dispatch")


def scratchpad_layout(elf: str) -> dict[str, tuple[int, int]]:
    """Parameter name -> (scratchpad index, left shift) from the
    ``params.txt`` aiecc writes beside an ELF: a count line, then ``<name>
    <index> <type> <kind>``; a value of kind ``core`` is stored shifted left
    by 2 (mlir-aie runtime_lib/test_lib/parameter_scratchpad.h). None there
    (the simulated device's programs): word i at index i."""
    path = Path(elf).with_suffix(".params.txt")
    if not path.exists() and not path.is_symlink():
        return {}
    layout = {}
    for number, line in enumerate(files.read_text(path).splitlines()[1:], start=2):
        fields = line.split()
        if len(fields) != 4 or not fields[1].isdigit():
            raise ValueError(f"{path}: line {number}: not `<name> <index> <type> <kind>`")
        name, index, _, kind = fields
        if name in layout:
            raise ValueError(f"{path}: line {number}: parameter {name} appears twice")
        layout[name] = (int(index), 2 if kind == "core" else 0)
    return layout


class XrtExecutable:
    """An image loaded through `xrt`. `reports` holds compare mode's last
    judgements; `trace` the last traced call's trace bytes."""

    def __init__(
        self,
        image: Image,
        buffers: dict[str, DeviceBuffer],
        xrt,
        *,
        poison: bool = False,
        device: Device | None = None,
    ) -> None:
        if len(image.elves) != len(image.programs):
            raise ValueError(f"{image.name}: the image was not compiled to loadable programs")
        self.image, self.buffers, self.xrt, self.poison = image, buffers, xrt, poison
        self.device = device
        self.reports: list[StepReport] = []
        self.xrt_device = xrt.device(0)
        for buffer in buffers.values():
            buffer.attach(xrt, self.xrt_device)
        self.trace_bo = xrt.bo(self.xrt_device, image.trace_size) if image.trace_size else None
        self.runs = []
        for elf in image.elves:
            context = xrt.hw_context(self.xrt_device, xrt.elf(elf))
            self.runs.append(xrt.run(xrt.kernel(context, ELF_KERNEL)))
        self._scratchpads = [scratchpad_layout(elf) for elf in image.elves]
        self._checks = per_call_checks(image.steps)
        self._generation = None
        self._references = (
            [kernel(s.op, use_device_model=False) for s in image.steps]
            if image.mode == "compare"
            else None
        )

    def _bind(self) -> None:
        """Set every run's arguments; again when the shared arena has grown
        (a larger buffer object)."""
        generation = self.buffers["scratch"].generation
        if generation == self._generation:
            return
        arguments = [self.buffers[a].bo for a in ("input", "output", "scratch")]
        arguments += [self.trace_bo] if self.trace_bo is not None else []
        for run in self.runs:
            for index, bo in enumerate(arguments):
                run.set_arg(index, bo)
        self._generation = generation

    def _write_words(self, words: np.ndarray) -> None:
        """Each program's words into its run's control scratchpad, where
        aiecc's params.txt puts them (else word i at index i)."""
        for run, program, layout in zip(self.runs, self.image.programs, self._scratchpads):
            if not program.words:
                continue
            scratchpad = np.frombuffer(run.get_ctrl_scratchpad_bo().map(), np.uint32)
            for local, word in enumerate(program.words):
                index, shift = layout.get(f"w{local}", (local, 0))
                # two's complement in 32 bits; a shifted `core` value loses its top bits
                scratchpad[index] = (int(words[word]) << shift) & 0xFFFFFFFF
            run.get_ctrl_scratchpad_bo().sync(self.xrt.TO_DEVICE, scratchpad.nbytes, 0)

    def __call__(self, values: Mapping[str, int]) -> None:
        words = evaluate(self.image.parameters, values)
        check_calls(self._checks, words)  # before anything moves
        self._bind()
        self.buffers["input"].sync_to_device()
        if words.size:
            out_of_range = [int(w) for w in words if not -(2**31) <= w < 2**31]
            if out_of_range:
                raise ValueError(
                    f"{self.image.name}: per-call value(s) {out_of_range} do not fit a 32-bit "
                    "scratchpad word"
                )
            self._write_words(words)
        if self.poison:
            self.buffers["scratch"].poison(self.image.transients)
            self.buffers["output"].poison([(0, self.buffers["output"].nbytes)])
        self.reports = []
        for index, run in enumerate(self.runs):
            inputs = self._device_inputs(index) if self._references else None
            run.start()
            run.wait()
            if self._references:
                self._judge(index, inputs, words)
        self.buffers["output"].sync_from_device()
        if self.image.mode != "fused":
            self.buffers["scratch"].sync_from_device()
        if self.trace_bo is not None:
            self.trace_bo.sync(self.xrt.FROM_DEVICE, self.image.trace_size, 0)

    @property
    def trace(self) -> bytes:
        """The trace buffer's bytes as of the last call (empty: not traced)."""
        return (
            bytes(np.asarray(self.trace_bo.map())[: self.image.trace_size])
            if self.trace_bo
            else b""
        )

    # ---- compare ----

    def _arrays(self, index: int, positions) -> list[np.ndarray]:
        step = self.image.steps[index]
        arrays = []
        for i in positions:
            p = step.args[i]
            buffer = self.buffers[p.arena]
            lo = p.offset // buffer.granule * buffer.granule
            hi = min(-(-(p.offset + p.nbytes) // buffer.granule) * buffer.granule, buffer.nbytes)
            buffer.bo.sync(self.xrt.FROM_DEVICE, hi - lo, lo)
            arrays.append(view(buffer.host, p.offset, p.nbytes, p.dtype, p.shape).copy())
        return arrays

    def _device_inputs(self, index: int) -> list[np.ndarray]:
        """What the step will read, as the device holds it."""
        return self._arrays(index, self.image.steps[index].reads)

    def _judge(self, index: int, inputs, words) -> None:
        step = self.image.steps[index]
        values = step_values(step.bindings, words)
        expected = self._references[index](*inputs, **values)
        got = self._arrays(index, step.writes)
        op = attrs.evolve(step.op, **values) if values else step.op
        tolerance = op.tolerance(self.device, inputs=inputs)
        for i, actual, want in zip(step.writes, got, expected):
            output = str(step.names[i])
            verdict = compare(actual, want, tolerance, name=output)
            name = type(step.op).__name__
            self.reports.append(
                StepReport(index, name, output, verdict.max_abs, verdict.max_rel, verdict.passed,
                           verdict.detail)
            )  # fmt: skip
            if not verdict.passed:
                log.warning("%s step %d (%s): %s", self.image.name, index, name, verdict.detail)
