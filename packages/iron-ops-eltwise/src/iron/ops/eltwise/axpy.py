"""AXPY: out = scalar_factor * x + y over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, bf16
from iron.ops.eltwise.common import ROUNDED, Binary


@attrs.frozen
class AXPY(Binary):
    """out = scalar_factor * x + y. The factor reaches the cores as a float32
    scalar and the multiply-add runs in the float32 accumulator: one rounding,
    on the store."""

    scalar_factor: float = 1.0

    cases = (
        Case({"size": 2048, "scalar_factor": 0.5, "num_aie_columns": 1}),
        # 8 columns fit npu2's 16 shim streams; npu1 has 4 columns and refuses
        Case({"size": 4096, "scalar_factor": -3.0, "num_aie_columns": 8}),
    )

    @staticmethod
    def arg_spec(size, dtype=bf16):
        return [
            ArgSpec("x", size, dtype, IN),
            ArgSpec("y", size, dtype, IN),
            ArgSpec("out", size, dtype, OUT),
        ]

    def reference(self, x, y):
        factor = np.float32(self.scalar_factor)
        return (factor * x.astype(np.float32) + y.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return ROUNDED

    @staticmethod
    def design(size, tile_size, num_aie_columns, num_channels, scalar_factor, device):
        from iron.ops.eltwise.line_kernels import axpy_model, float_bits, shipped_kernel
        from iron.ops.eltwise.streaming import elementwise_design

        return elementwise_design(
            "axpy",
            device,
            "x y out",
            size=size,
            tile=tile_size,
            columns=num_aie_columns,
            channels=num_channels,
            kernel=shipped_kernel("iron_axpy_bf16", 2, tile_size, 1, axpy_model),
            extra=(float_bits(scalar_factor),),
        )
