"""ElementwiseMul: y = a * b over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.ops.eltwise.common import ELEMENTWISE_CASES, ROUNDED, Binary


@attrs.frozen
class ElementwiseMul(Binary):
    """y = a * b: the product of two bf16 values is exact in float32, so the
    one rounding is the store to bf16."""

    cases = ELEMENTWISE_CASES

    def reference(self, a, b):
        return (a.astype(np.float32) * b.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return ROUNDED
