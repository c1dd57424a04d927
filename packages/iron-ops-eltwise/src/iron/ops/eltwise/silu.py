"""SiLU (swish): y = x * sigmoid(x) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.core.numerics import sigmoid
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Unary, approximated


@attrs.frozen
class SiLU(Unary):
    """y = x / (1 + exp(-x)), with `iron.core.numerics.sigmoid`:
    nothing overflows and the negative tail keeps its precision."""

    cases = ELEMENTWISE_CASES

    def reference(self, x):
        x = x.astype(np.float32)
        return (x * sigmoid(x)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return approximated(device or self.device)
