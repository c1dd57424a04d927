"""Tanh: y = tanh(x) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Activation, approximated


@attrs.frozen
class Tanh(Activation):
    """y = tanh(x)."""

    cases = ELEMENTWISE_CASES
    kernel_name = "tanh"

    def reference(self, x):
        return np.tanh(x.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return approximated(device or self.device)
