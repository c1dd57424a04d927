"""MemCopy: y = x, `size` bf16 elements through the array."""

import attrs

from iron.core import Tolerance
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Unary


@attrs.frozen
class MemCopy(Unary):
    """y = x, moved line by line through one core per (column, channel)."""

    cases = ELEMENTWISE_CASES

    @staticmethod
    def design(size, tile_size, num_aie_columns, num_channels, device):
        from iron.ops.eltwise import movers  # loads iron.design on first use

        return movers.mem_copy(size, tile_size, num_aie_columns, num_channels, device)

    def reference(self, x):
        return x.copy()

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()
