"""ElementwiseAdd: y = a + b over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.ops.eltwise.common import ELEMENTWISE_CASES, ROUNDED, Binary


@attrs.frozen
class ElementwiseAdd(Binary):
    """y = a + b, summed in float32 and rounded to bf16 once."""

    cases = ELEMENTWISE_CASES

    def reference(self, a, b):
        return (a.astype(np.float32) + b.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return ROUNDED
