import attrs
import numpy as np

from iron.core import Case, Operator, Tolerance, bf16, per_call, same_shape_unary


@attrs.frozen
class Offset(Operator):
    size: int
    offset: int = per_call(0)

    cases = (Case({"size": 512}),)

    @staticmethod
    def arg_spec(size, dtype=bf16):
        return same_shape_unary(size, dtype)

    def reference(self, x, *, offset):
        return (x.astype(np.float32) + np.float32(offset)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01)
