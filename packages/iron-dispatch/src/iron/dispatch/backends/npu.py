"""The NPU backend: IRON's device runtime (`iron.dispatch.runtime`) over
pyxrt, with each program's fused MLIR compiled by aiecc and Peano
(`iron.dispatch.pipeline`). Where pyxrt, an NPU or the toolchain is
missing it says which, and how to get each. Every step must have a design:
a full ELF cannot call the host between steps."""

from __future__ import annotations

from iron.core import environment
from iron.design import ToolchainError, find_toolchain
from iron.dispatch.backends import BackendUnavailable, CompilingBackend
from iron.dispatch.image import PARAMETER_WORDS
from iron.dispatch.runtime import XrtExecutable
from iron.dispatch.xrt import PyXrt


class NpuBackend(CompilingBackend):
    name = "npu"
    max_words = PARAMETER_WORDS
    device_programs = True

    def __init__(self, session) -> None:
        super().__init__(session)
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
                find_toolchain()
            except ToolchainError as error:
                missing.append(str(error))
        if missing:
            return False, "; ".join(missing)
        return True, "pyxrt, an NPU, aiecc and Peano are present"

    def toolchain(self):
        return find_toolchain()

    def load(self, image, buffers, *, device=None, poison=False) -> XrtExecutable:
        self.check_mode(image.mode)
        ok, why = self.available()
        if not ok:
            raise BackendUnavailable(f"backend 'npu' is not available here: {why}")
        if self._xrt is None:
            self._xrt = PyXrt()
        return XrtExecutable(image, buffers, self._xrt, poison=poison, device=device)
