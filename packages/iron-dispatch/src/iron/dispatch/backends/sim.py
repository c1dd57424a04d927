"""The simulated NPU: the device's memory semantics on the host. Device
memory apart from the host mirror, explicit syncs a coherence granule at a
time, per-call values through a 32-word parameter scratchpad (fused), one
dispatch per step with host syncs around the chain (separate), and a
per-step judge against the reference (compare). Steps run their operator's
`simulate` (its model of the device kernel)."""

from __future__ import annotations

from iron.dispatch.backends import CompilingBackend
from iron.dispatch.executable import CompareExecutable, FusedExecutable, SeparateExecutable
from iron.dispatch.image import PARAMETER_WORDS, build


class SimBackend(CompilingBackend):
    name = "sim"
    max_words = PARAMETER_WORDS

    def load(self, image, buffers, *, device=None, poison=False) -> FusedExecutable:
        self.check_mode(image.mode)
        if image.mode == "compare":
            return CompareExecutable(
                image, buffers, device_model=True, poison=poison, device=device
            )
        kind = FusedExecutable if image.mode == "fused" else SeparateExecutable
        return kind(image, buffers, device_model=True, poison=poison)

    def build(self, runlist, layout, mode, flags):
        # separate and compare dispatch step by step: per-call values are
        # dispatch scalars there, so only the fused image has the 32-word limit
        max_words = self.max_words if mode == "fused" else None
        return build(
            runlist, layout, backend=self.name, mode=mode, flags=flags, max_words=max_words
        )
