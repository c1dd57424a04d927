"""MemCopy: y = x, `size` bf16 elements through the array."""

import attrs

from iron.core import Tolerance
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Unary


@attrs.frozen
class MemCopy(Unary):
    """y = x, moved line by line through one core per (column, channel)."""

    cases = ELEMENTWISE_CASES

    def reference(self, x):
        return x.copy()

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()
