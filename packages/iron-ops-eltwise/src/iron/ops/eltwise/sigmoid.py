"""Sigmoid: y = 1 / (1 + exp(-x)) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Unary, approximated


@attrs.frozen
class Sigmoid(Unary):
    """y = 1 / (1 + exp(-x)), evaluated as exp(-log(1 + exp(-x))) so no
    intermediate overflows."""

    cases = ELEMENTWISE_CASES

    def reference(self, x):
        return np.exp(-np.logaddexp(np.float32(0), -x.astype(np.float32))).astype(bf16)

    def tolerance(self, device=None):
        return approximated(device or self.device)
