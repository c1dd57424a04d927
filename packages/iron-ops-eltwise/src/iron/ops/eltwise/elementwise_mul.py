"""ElementwiseMul: y = a * b over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.ops.eltwise.common import ELEMENTWISE_CASES, ROUNDED, Binary


@attrs.frozen
class ElementwiseMul(Binary):
    """y = a * b: the product of two bf16 values is exact in float32, so the
    one rounding is the store to bf16."""

    host = "iron.ops.eltwise.host:elementwise_mul"  # the cpu backend's kernel
    cases = ELEMENTWISE_CASES

    def reference(self, a, b):
        return (a.astype(np.float32) * b.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return ROUNDED

    @staticmethod
    def design(size, tile_size, num_aie_columns, num_channels, device):
        from iron.ops.eltwise.line_kernels import binary_kernel
        from iron.ops.eltwise.streaming import elementwise_design

        return elementwise_design(
            "elementwise_mul",
            device,
            "a b y",
            size=size,
            tile=tile_size,
            columns=num_aie_columns,
            channels=num_channels,
            kernel=binary_kernel("mul", tile_size),
        )
