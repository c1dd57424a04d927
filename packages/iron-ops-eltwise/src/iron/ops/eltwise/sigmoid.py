"""Sigmoid: y = 1 / (1 + exp(-x)) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.core.numerics import sigmoid
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Activation, approximated

#: the kernel's worst absolute error beyond its device's rtol, over every finite
#: bf16 input up to 2^32 in magnitude: 8.72e-4 (aie2, the lookup table) and 8.89e-4
#: (aie2p), rounded up; tests/test_designs_streaming.py measures it
KERNEL_ATOL = 1e-3


@attrs.frozen
class Sigmoid(Activation):
    """y = 1 / (1 + exp(-x)), as exp(min(x, 0)) / (1 + exp(-|x|)): nothing
    overflows and both tails keep their precision."""

    cases = ELEMENTWISE_CASES
    kernel_name = "sigmoid"

    def reference(self, x):
        return sigmoid(x.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return approximated(device or self.device, KERNEL_ATOL)
