"""The reference backend: each step's numpy reference on the host, on views
into one byte arena per layout arena at the planned offsets, so a planning
bug that aliases two live buffers gives wrong numbers. It is the oracle, so
it cannot judge itself: it has no compare mode."""

from __future__ import annotations

from iron.dispatch.backends import CompilingBackend
from iron.dispatch.executable import FusedExecutable, SeparateExecutable


class ReferenceBackend(CompilingBackend):
    name = "reference"
    unified = True
    modes = ("fused", "separate")

    def load(self, image, buffers, *, device=None, poison=False) -> FusedExecutable:
        self.check_mode(image.mode)
        kind = FusedExecutable if image.mode == "fused" else SeparateExecutable
        return kind(image, buffers, device_model=False, poison=poison)
