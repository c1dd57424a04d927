"""Sigmoid: y = 1 / (1 + exp(-x)) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.core.numerics import sigmoid
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Activation, approximated

#: the kernel's worst absolute error beyond its device's rtol, over every finite
#: bf16 input up to 2^32 in magnitude: 8.72e-4 (aie2, the lookup table) and 8.89e-4
#: (aie2p), rounded up; tests/test_designs_streaming.py measures it
KERNEL_ATOL = 1e-3


@attrs.frozen
class Sigmoid(Activation):
    """y = 1 / (1 + exp(-x)), as exp(min(x, 0)) / (1 + exp(-|x|)): nothing
    overflows and both tails keep their precision."""

    cases = ELEMENTWISE_CASES

    def reference(self, x):
        return sigmoid(x.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return approximated(device or self.device, KERNEL_ATOL)

    @staticmethod
    def design(size, tile_size, num_aie_columns, num_channels, device):
        from iron.ops.eltwise.line_kernels import activation_kernel
        from iron.ops.eltwise.streaming import elementwise_design

        return elementwise_design(
            "sigmoid",
            device,
            "x y",
            size=size,
            tile=tile_size,
            columns=num_aie_columns,
            channels=num_channels,
            kernel=activation_kernel("sigmoid", tile_size, device.arch),
        )
