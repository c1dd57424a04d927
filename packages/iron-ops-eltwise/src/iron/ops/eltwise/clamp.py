"""Clamp: y = min(max(x, lo), hi) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import Case, bf16, require
from iron.ops.eltwise.common import VALUE_EXACT, Unary


@attrs.frozen
class Clamp(Unary):
    """y = min(max(x, lo), hi). Bounds that are not bf16 values clamp to
    their bf16 rounding, as a core holding them in bf16 would."""

    lo: float = -1.0
    hi: float = 1.0

    cases = (
        Case({"size": 1024, "lo": -2.0, "hi": 2.0}),
        Case({"size": 2048, "lo": 0.0, "hi": 6.0, "num_aie_columns": 2}),
    )

    def validate(self):
        super().validate()
        require(self, "lo", self.lo <= self.hi, f"at most hi={self.hi!r}")

    def reference(self, x):
        return np.clip(x.astype(np.float32), np.float32(self.lo), np.float32(self.hi)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return VALUE_EXACT

    @staticmethod
    def design(size, tile_size, num_aie_columns, num_channels, lo, hi, device):
        from iron.ops.eltwise.line_kernels import clamp_model, float_bits, shipped_kernel
        from iron.ops.eltwise.streaming import elementwise_design

        return elementwise_design(
            "clamp",
            device,
            "x y",
            size=size,
            tile=tile_size,
            columns=num_aie_columns,
            channels=num_channels,
            kernel=shipped_kernel("iron_clamp_bf16", 1, tile_size, 2, clamp_model),
            extra=(float_bits(lo), float_bits(hi)),
        )
