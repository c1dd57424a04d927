"""ReLU: y = max(x, 0) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.ops.eltwise.common import ELEMENTWISE_CASES, VALUE_EXACT, Unary


@attrs.frozen
class ReLU(Unary):
    """y = max(x, 0): nothing rounds, so the values match exactly."""

    cases = ELEMENTWISE_CASES

    def reference(self, x):
        return np.maximum(x.astype(np.float32), np.float32(0)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return VALUE_EXACT

    @staticmethod
    def design(size, tile_size, num_aie_columns, num_channels, device):
        from iron.ops.eltwise.line_kernels import relu_kernel
        from iron.ops.eltwise.streaming import elementwise_design

        return elementwise_design(
            "relu",
            device,
            "x y",
            size=size,
            tile=tile_size,
            columns=num_aie_columns,
            channels=num_channels,
            kernel=relu_kernel(tile_size),
        )
