"""SiLU (swish): y = x * sigmoid(x) over `size` bf16 elements."""

import attrs
import numpy as np

from iron.core import bf16
from iron.core.numerics import sigmoid
from iron.ops.eltwise.common import ELEMENTWISE_CASES, Activation, approximated

#: the kernel's worst absolute error beyond its device's rtol, over every finite
#: bf16 input up to 2^32 in magnitude: 6.03e-3 (aie2, the lookup table) and 6.17e-3
#: (aie2p), rounded up; tests/test_designs_streaming.py measures it
KERNEL_ATOL = 7e-3


@attrs.frozen
class SiLU(Activation):
    """y = x / (1 + exp(-x)), with `iron.core.numerics.sigmoid`:
    nothing overflows and the negative tail keeps its precision."""

    host = "iron.ops.eltwise.host:silu"  # the cpu backend's kernel
    cases = ELEMENTWISE_CASES
    kernel_name = "silu"

    def reference(self, x):
        x = x.astype(np.float32)
        return (x * sigmoid(x)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return approximated(device or self.device, KERNEL_ATOL)
