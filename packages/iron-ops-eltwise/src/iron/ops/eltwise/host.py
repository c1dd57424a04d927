"""Host kernels: what the `cpu` backend runs instead of a reference where
the reference would cost more than the operator's bytes. A kernel is
``kernel(op, *arrays, **per_call)`` with the step's arrays in spec order;
it writes its outputs in place (see iron-dispatch's README, "Writing a
backend")."""

from __future__ import annotations

import numpy as np


def strided_copy(op, x, y, *, in_offset, out_offset):
    """Writes the window alone: a KV-cache row lands in the cache in place,
    where the reference returns (and the backend copies back) the whole
    cache."""
    op._check_offsets(in_offset, out_offset)
    start = int(in_offset)
    if len(op.sizes) == 1 and op.strides == (1,):
        source = x[start : start + op.count]
    else:
        shape, strides = op.sizes, tuple(s * x.itemsize for s in op.strides)
        source = np.lib.stride_tricks.as_strided(x[start:], shape, strides, writeable=False)
    y[int(out_offset) : int(out_offset) + op.count] = source.reshape(-1)
