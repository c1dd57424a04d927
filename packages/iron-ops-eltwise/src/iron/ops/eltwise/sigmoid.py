"""Sigmoid: y = 1 / (1 + exp(-x)) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.core.numerics import sigmoid
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Unary, approximated


@attrs.frozen
class Sigmoid(Unary):
    """y = 1 / (1 + exp(-x)), as exp(min(x, 0)) / (1 + exp(-|x|)): nothing
    overflows and both tails keep their precision."""

    cases = ELEMENTWISE_CASES

    def reference(self, x):
        return sigmoid(x.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return approximated(device or self.device)
