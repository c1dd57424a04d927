"""Tanh: y = tanh(x) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Unary, approximated


@attrs.frozen
class Tanh(Unary):
    """y = tanh(x)."""

    cases = ELEMENTWISE_CASES

    def reference(self, x):
        return np.tanh(x.astype(np.float32)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return approximated(device or self.device)
