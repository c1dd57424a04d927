"""LeakyReLU: y = x if x >= 0 else alpha * x, over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import Case, bf16
from iron.ops.eltwise.common import ROUNDED, Unary


@attrs.frozen
class LeakyReLU(Unary):
    """y = x where x >= 0, alpha * x elsewhere (alpha as a float32 scalar,
    the product rounded to bf16 once)."""

    alpha: float = 0.01

    cases = (
        Case({"size": 1024}),
        Case({"size": 4096, "alpha": 0.2, "num_aie_columns": 2, "tile_size": 512}),
    )

    def reference(self, x):
        x = x.astype(np.float32)
        return np.where(x >= 0, x, np.float32(self.alpha) * x).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return ROUNDED

    @staticmethod
    def design(size, tile_size, num_aie_columns, num_channels, alpha, device):
        from iron.ops.eltwise.line_kernels import float_bits, leaky_relu_model, shipped_kernel
        from iron.ops.eltwise.streaming import elementwise_design

        return elementwise_design(
            "leaky_relu",
            device,
            "x y",
            size=size,
            tile=tile_size,
            columns=num_aie_columns,
            channels=num_channels,
            kernel=shipped_kernel("iron_leaky_relu_bf16", 1, tile_size, 1, leaky_relu_model),
            extra=(float_bits(alpha),),
        )
