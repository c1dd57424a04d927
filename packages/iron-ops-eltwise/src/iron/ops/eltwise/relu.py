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
