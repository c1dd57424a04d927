"""Transpose: y = x.T for an (M, N) bf16 matrix."""

import attrs

from iron.core import IN, OUT, ArgSpec, Case, Operator, Tolerance, bf16, require, tunable
from iron.ops.eltwise.common import ROW_CAP, bd_problem, check_array

#: kernel tile sides tried by default, largest first; a side is a multiple of
#: the 8 x 8 blocks the kernel transposes
TILE_SIDES = (128, 64, 32, 16, 8)


def _largest_side(extent: int, parts: int, cap: int) -> int:
    """The largest tile side up to `cap` that splits `extent` into `parts`
    whole shares of whole tiles (8, the smallest, when none does)."""
    return next((t for t in TILE_SIDES if t <= cap and extent % (t * parts) == 0), 8)


@attrs.frozen
class Transpose(Operator):
    """y (N, M) = x (M, N) transposed, bit-exact. The matrix moves in
    tile_m x tile_n tiles; the columns split N and the channels split M,
    each core taking the same whole number of tiles."""

    M: int
    N: int
    num_aie_columns: int | None = tunable()
    num_channels: int | None = tunable()
    tile_m: int | None = tunable()
    tile_n: int | None = tunable()

    cases = (
        Case({"M": 64, "N": 128, "num_aie_columns": 2}),
        Case({"M": 2048, "N": 64, "num_aie_columns": 1, "num_channels": 2}),
    )

    @staticmethod
    def arg_spec(M, N, dtype=bf16):
        return [ArgSpec("x", (M, N), dtype, IN), ArgSpec("y", (N, M), dtype, OUT)]

    def validate(self):
        require(self, "M", self.M >= 8 and self.M % 8 == 0, "a multiple of 8 (whole 8 x 8 blocks)")
        require(self, "N", self.N >= 8 and self.N % 8 == 0, "a multiple of 8 (whole 8 x 8 blocks)")
        tm, tn = self.tile_m, self.tile_n
        for name, tile, extent in (("tile_m", tm, "M"), ("tile_n", tn, "N")):
            if tile is not None:
                require(
                    self,
                    name,
                    tile >= 8 and tile % 8 == 0 and getattr(self, extent) % tile == 0,
                    f"a multiple of 8 that divides {extent}={getattr(self, extent)}",
                )
        if tm is not None and tn is not None:
            require(
                self,
                "tile_m",
                tm * tn <= ROW_CAP,
                f"tile_m x tile_n at most {ROW_CAP} elements (one core's tile)",
            )
        channels, columns = self.num_channels, self.num_aie_columns
        if tm is not None and channels is not None:
            require(
                self,
                "num_channels",
                (self.M // tm) % channels == 0,
                f"must divide the {self.M // tm} row tiles (M / tile_m)",
            )
        if tn is not None and columns is not None:
            require(
                self,
                "num_aie_columns",
                (self.N // tn) % columns == 0,
                f"must divide the {self.N // tn} column tiles (N / tile_n)",
            )
        check_array(self, "M", None, "tiles")
        if None not in (tm, tn, channels, columns):
            self._check_transfers()

    def _check_transfers(self):
        """Each core's fill and drain walk its share of x and y tile by tile
        with one shim buffer descriptor each."""
        M, N, tm, tn = self.M, self.N, self.tile_m, self.tile_n
        blocks = (M // self.num_channels // tm, N // self.num_aie_columns // tn)
        for side, sizes, strides in (
            ("fill", (*blocks, tm, tn), (tm * N, tn, N, 1)),
            ("drain", (*blocks, tn, tm), (tm, tn * M, M, 1)),
        ):
            problem = bd_problem(sizes, strides, bf16.itemsize)
            require(
                self,
                "tile_m",
                problem is None,
                f"the {side} pattern (sizes={sizes}, strides={strides}) must fit one shim "
                f"buffer descriptor: {problem}",
            )

    def tune(self, device):
        channels = self.num_channels or 1
        # the columns split N, the channels split M: the largest tiles that leave each
        # core whole tiles, then the most columns that divide N's tiles and fit the shim
        tile_n = self.tile_n or _largest_side(self.N, self.num_aie_columns or 1, 64)
        tile_m = self.tile_m or _largest_side(self.M, channels, ROW_CAP // tile_n)
        most = device.shim_columns(1, channels)
        columns = next(c for c in range(most, 0, -1) if (self.N // tile_n) % c == 0)
        return {
            "tile_m": tile_m,
            "tile_n": tile_n,
            "num_channels": channels,
            "num_aie_columns": columns,
        }

    @staticmethod
    def design(M, N, tile_m, tile_n, num_aie_columns, num_channels, device):
        from iron.ops.eltwise import movers  # loads iron.design on first use

        return movers.transpose(M, N, tile_m, tile_n, num_aie_columns, num_channels, device)

    def reference(self, x):
        return x.T.copy()

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()
