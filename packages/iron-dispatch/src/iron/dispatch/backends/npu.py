"""The NPU backend: mlir-aie lowering, aiecc and XRT. Where any of those is
missing it says which, and how to get it."""

from __future__ import annotations

from iron.core import environment
from iron.dispatch.backends import BackendUnavailable, CompilingBackend


class NpuBackend(CompilingBackend):
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

    def load(self, image, buffers, *, device=None, poison=False):
        raise BackendUnavailable(f"backend 'npu' is not available here: {self.available()[1]}")
