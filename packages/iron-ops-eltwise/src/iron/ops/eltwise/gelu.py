"""GELU over `size` bf16 elements, in its tanh approximation."""

import attrs
import numpy as np

from iron.core import bf16
from iron.core.numerics import sigmoid
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Unary, approximated

_SQRT_2_OVER_PI = np.float32(np.sqrt(2 / np.pi))


@attrs.frozen
class GELU(Unary):
    """y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh
    approximation (PyTorch's approximate="tanh"), the form IRON's GELU
    kernels are tested against. The reference evaluates the identical x *
    sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), which keeps its precision in
    the negative tail where 1 + tanh cancels."""

    cases = ELEMENTWISE_CASES

    def reference(self, x):
        x = x.astype(np.float32)
        z = 2 * _SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)
        return (x * sigmoid(z)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return approximated(device or self.device)
