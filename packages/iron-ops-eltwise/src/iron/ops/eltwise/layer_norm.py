"""LayerNorm: y = (x - mean) / sqrt(var + eps) per row of `cols`, no affine."""

import attrs
import numpy as np

from iron.core import Case, Operator, bf16, require, same_shape_unary, tunable
from iron.ops.eltwise.common import approximated, check_array, check_row, default_array


@attrs.frozen
class LayerNorm(Operator):
    """Each row of `cols` elements normalised to zero mean and unit variance
    (the population variance), in float32, rounded once. No scale or bias."""

    rows: int
    cols: int
    eps: float = 1e-5
    num_aie_columns: int | None = tunable()
    num_channels: int | None = tunable()

    cases = (
        Case({"rows": 16, "cols": 256, "num_aie_columns": 2}),
        Case({"rows": 4, "cols": 2048}),
    )

    @staticmethod
    def arg_spec(rows, cols, dtype=bf16):
        return same_shape_unary((rows, cols), dtype)

    def validate(self):
        require(self, "rows", self.rows >= 1, "at least 1")
        check_row(self, "cols", self.cols)
        require(self, "eps", self.eps > 0, "positive")
        check_array(self, "rows", self.rows, "rows")

    def tune(self, device):
        return default_array(self, device, self.rows)

    @staticmethod
    def design(rows, cols, eps, num_aie_columns, num_channels, device):
        from iron.ops.eltwise import rows as row_designs  # loads iron.design on first use

        return row_designs.layer_norm(rows, cols, eps, num_aie_columns, num_channels, device)

    def reference(self, x):
        x = x.astype(np.float32)
        centred = x - np.mean(x, axis=-1, keepdims=True)
        variance = np.mean(centred * centred, axis=-1, keepdims=True)
        return (centred / np.sqrt(variance + np.float32(self.eps))).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        # the cores' inverse square root is an approximation; and the kernels
        # subtract a bf16 mean, so an output near 0 keeps an absolute error
        # of about |mean| / std * 2^-9 (measured under 2^-8 on unit-normal rows)
        return approximated(device or self.device, kernel_atol=2**-8)
