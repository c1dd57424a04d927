import attrs
import numpy as np

from iron.core import Case, Operator, Tolerance, bf16, require, same_shape_unary


@attrs.frozen
class Scale(Operator):
    size: int
    factor: float = 2.0

    cases = (Case({"size": 1024}), Case({"size": 256, "factor": -0.5}))

    @staticmethod
    def arg_spec(size, dtype=bf16):
        return same_shape_unary(size, dtype)

    def validate(self):
        require(
            self, "size", self.size > 0 and self.size % 2 == 0, "a positive even number of elements"
        )

    def reference(self, x):
        return (x.astype(np.float32) * np.float32(self.factor)).astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.relative(0.01)
