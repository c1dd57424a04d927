"""Host kernels (the cpu backend's): the same bits as the reference, the
rest of an INOUT output left as it was."""

import numpy as np
import pytest

from iron.core import bf16, registry
from iron.ops.eltwise import StridedCopy
from iron.ops.eltwise.host import strided_copy


@pytest.mark.parametrize("case", StridedCopy.cases, ids=lambda c: str(c.params["sizes"]))
def test_strided_copy_writes_the_reference_bits_into_its_window_alone(case):
    op = StridedCopy(**case.params)
    x_spec, y_spec = op.arg_specs()
    x = np.arange(x_spec.shape[0]).astype(x_spec.dtype)
    y = np.full(y_spec.shape, -1, y_spec.dtype)
    offsets = {"in_offset": 0, "out_offset": y_spec.shape[0] - op.count}
    want = op.reference(x, y, **offsets)
    before = y.ctypes.data
    strided_copy(op, x, y, **offsets)
    assert y.tobytes() == want.tobytes() and y.ctypes.data == before


def test_strided_copy_names_its_host_kernel_and_checks_offsets():
    assert registry.get_operator("StridedCopy").host == "iron.ops.eltwise.host:strided_copy"
    op = StridedCopy(512, 8192, sizes=(512,), strides=(1,))
    with pytest.raises(Exception, match="out_offset=8000: out of range"):
        strided_copy(op, np.zeros(512, bf16), np.zeros(8192, bf16), in_offset=0, out_offset=8000)
