"""RMSNorm: y = x / sqrt(mean(x^2) + eps) [* weight], over rows of `tile_size`."""

import attrs
import numpy as np

from iron.core import IN, OUT, ArgSpec, Case, Operator, bf16, require, tunable
from iron.ops.eltwise.common import approximated, check_array, check_row, default_array


@attrs.frozen
class RMSNorm(Operator):
    """Root-mean-square norm of each row of `tile_size` elements (the
    `size` elements are size / tile_size rows), times `weight` when
    `weighted`: y = x * rsqrt(mean(x^2) + eps) [* weight], in float32,
    rounded once. The weight is one stream shared by every core."""

    size: int
    tile_size: int
    weighted: bool = False
    eps: float = 1e-5
    num_aie_columns: int | None = tunable()
    num_channels: int | None = tunable()

    host = "iron.ops.eltwise.host:rms_norm"  # the cpu backend's kernel

    cases = (
        Case({"size": 1024, "tile_size": 256}),
        Case({"size": 8192, "tile_size": 2048, "weighted": True}),
        Case({"size": 32768, "tile_size": 2048, "weighted": True, "num_aie_columns": 4}),
    )

    @staticmethod
    def arg_spec(size, tile_size, weighted, dtype=bf16):
        rows = (size // tile_size, tile_size)
        weight = [ArgSpec("weight", (tile_size,), dtype, IN)] if weighted else []
        return [ArgSpec("x", rows, dtype, IN), *weight, ArgSpec("y", rows, dtype, OUT)]

    def validate(self):
        check_row(self, "tile_size", self.tile_size)
        require(
            self,
            "size",
            self.size >= 1 and self.size % self.tile_size == 0,
            f"a whole number of {self.tile_size}-element rows (tile_size)",
        )
        require(self, "eps", self.eps > 0, "positive")
        rows = self.size // self.tile_size
        check_array(self, "size", rows, "rows", replicated=int(self.weighted))

    def tune(self, device):
        rows = self.size // self.tile_size
        return default_array(self, device, rows, replicated=int(self.weighted))

    @property
    def rows(self) -> int:
        return self.size // self.tile_size

    @staticmethod
    def design(tile_size, rows, weighted, eps, num_aie_columns, num_channels, device):
        from iron.ops.eltwise import rows as row_designs  # loads iron.design on first use

        return row_designs.rms_norm(
            tile_size, rows, weighted, eps, num_aie_columns, num_channels, device
        )

    def reference(self, x, weight=None):
        x = x.astype(np.float32)
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(self.eps))
        return (y if weight is None else y * weight.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        # the cores' inverse square root is an approximation
        return approximated(device or self.device)
