"""The NPU backend: IRON's device runtime (`iron.dispatch.runtime`) over
pyxrt, with each program's fused MLIR compiled by aiecc and Peano
(`iron.dispatch.pipeline`). Where pyxrt, an NPU or the toolchain is
missing it says which, and how to get each. Every step must have a design:
a device image cannot call the host between steps. A fused image is a full
ELF; a separate or compare image an xclbin chain whose per-call streams are
compiled (instructions only) for each new value."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from iron.core import environment, files
from iron.design import ToolchainError, aiecc
from iron.dispatch.backends import BackendUnavailable, CompilingBackend
from iron.dispatch.fusion import xclbin_mlir
from iron.dispatch.identity import digest
from iron.dispatch.image import PARAMETER_WORDS
from iron.dispatch.packaging import rtp_params
from iron.dispatch.pipeline import compile_stream
from iron.dispatch.program import step_design
from iron.dispatch.runtime import XclbinExecutable, XrtExecutable
from iron.dispatch.streams import stream_key
from iron.dispatch.xrt import PyXrt


class NpuBackend(CompilingBackend):
    name = "npu"
    max_words = PARAMETER_WORDS
    device_programs = True

    def __init__(self, session) -> None:
        super().__init__(session)
        self.streams = session.streams
        self._xrt = None

    def close(self) -> None:
        """Drop the pyxrt handle (its device and contexts go with the executables)."""
        self._xrt = None

    def available(self) -> tuple[bool, str]:
        probes = [environment.mlir_aie(), environment.pyxrt(), environment.npu_device()]
        missing = [
            f"{p.name} is missing ({p.detail}): {p.how_to_get}" for p in probes if not p.present
        ]
        if probes[0].present:  # without mlir-aie, its tools are missing by definition
            try:
                aiecc.find_toolchain()  # looked up per call: tests stand one in
            except ToolchainError as error:
                missing.append(str(error))
        if missing:
            return False, "; ".join(missing)
        return True, "pyxrt, an NPU, aiecc and Peano are present"

    def toolchain(self):
        return aiecc.find_toolchain()

    def load(self, image, buffers, *, device=None, poison=False) -> XrtExecutable:
        self.check_mode(image.mode)
        ok, why = self.available()
        if not ok:
            raise BackendUnavailable(f"backend 'npu' is not available here: {why}")
        if self._xrt is None:
            self._xrt = PyXrt()
        if image.mode == "fused":
            return XrtExecutable(image, buffers, self._xrt, poison=poison, device=device)
        return XclbinExecutable(
            image, buffers, self._xrt, streams=self._streams(image), poison=poison, device=device
        )

    def _streams(self, image):
        """Each step's stream: its static one from the compile, else an
        instructions-only compile against the xclbin for the call's
        parameters and values (a cache entry of its own, keyed by
        `stream_key`), kept by the session's `Streams`. A runtime-shaped
        step's design and words at the values come from `Streams.stream`."""
        toolchain, cache, streams = self.toolchain(), self.cache, self.streams

        def compiled(index: int, params: dict, values: dict) -> np.ndarray:
            program = image.programs[index]
            step = program.steps[0]
            op = image.steps[step.index].op
            design = step_design(op, program.name)
            rtp = rtp_params(design, step)  # as the xclbin's link reads them
            if step.stream:
                shaped = streams.stream(op, design, values, rtp)
                design, params = shaped.lowered.design, shaped.params
            mlir = xclbin_mlir(design, step.device, params, rtp)

            def build(staging: Path) -> dict:
                compile_stream(mlir, staging / "stream.bin", toolchain, program.name)
                return {"name": program.name}

            key = digest(repr(("instructions", step.device, stream_key(step, params, values))))
            entry, _ = cache.get_or_build(key, build, kind="instructions")
            return np.frombuffer(files.read_bytes(entry / "stream.bin"), np.uint32)

        def instructions(index: int, params: dict, values: dict) -> np.ndarray:
            if image.elves[index]:
                return np.frombuffer(files.read_bytes(image.elves[index]), np.uint32)
            key = (image.xclbin, index, stream_key(image.programs[index].steps[0], params, values))
            return streams.instructions(key, lambda: compiled(index, params, values))

        return instructions
