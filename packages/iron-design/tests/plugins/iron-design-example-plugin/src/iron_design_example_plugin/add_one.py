"""y = x + 1 over `size` int32 values, one `tile`-element line at a time on
one core: an operator with a design."""

import attrs
import numpy as np

from iron.core import Case, Operator, Tolerance, require, same_shape_unary
from iron.design import examples


@attrs.frozen
class AddOne(Operator):
    size: int
    tile: int = 1024

    cases = (
        Case({"size": 4096}),
        # two 64 KiB lines in and two out: more than a core's memory
        Case({"size": 65536, "tile": 16384}, id="oversized-lines"),
    )

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size, np.int32)

    def validate(self):
        require(self, "size", self.size % self.tile == 0, "a whole number of tiles")

    def reference(self, x):
        return x + np.int32(1)

    def tolerance(self, device=None, *, inputs=None):
        return Tolerance.exact()

    @staticmethod
    def design(size, tile, device):
        return examples.add_one(device, n=size, tile=tile)
