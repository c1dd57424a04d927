"""Tanh: y = tanh(x) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Activation, approximated


@attrs.frozen
class Tanh(Activation):
    """y = tanh(x)."""

    cases = ELEMENTWISE_CASES

    def reference(self, x):
        return np.tanh(x.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return approximated(device or self.device)

    @staticmethod
    def design(size, tile_size, num_aie_columns, num_channels, device):
        from iron.ops.eltwise.line_kernels import activation_kernel
        from iron.ops.eltwise.streaming import elementwise_design

        return elementwise_design(
            "tanh",
            device,
            "x y",
            size=size,
            tile=tile_size,
            columns=num_aie_columns,
            channels=num_channels,
            kernel=activation_kernel("tanh", tile_size, device.arch),
        )
