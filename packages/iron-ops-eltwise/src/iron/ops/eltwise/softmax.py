"""Softmax per row of `cols`; columns at or past the per-call `valid` are 0."""

import attrs
import numpy as np

from iron.core import (
    Case,
    Operator,
    OperatorError,
    bf16,
    per_call,
    require,
    same_shape_unary,
    tunable,
)
from iron.ops.eltwise.common import approximated, check_array, check_row, default_array


@attrs.frozen
class Softmax(Operator):
    """y = exp(x - max) / sum(exp(x - max)) over the first `valid` columns
    of each row, in float32, rounded once; columns >= valid are exactly 0.
    `valid` is per call (a decode step's context length): None or `cols`
    means every column."""

    rows: int
    cols: int
    num_aie_columns: int | None = tunable()
    num_channels: int | None = tunable()
    valid: int | None = per_call(None)

    host = "iron.ops.eltwise.host:softmax"  # the cpu backend's kernel

    cases = (
        Case({"rows": 16, "cols": 64, "num_aie_columns": 2}),
        Case({"rows": 32, "cols": 2048, "num_aie_columns": 4}),
    )

    @staticmethod
    def arg_spec(rows, cols, dtype=bf16):
        return same_shape_unary((rows, cols), dtype)

    def validate(self):
        require(self, "rows", self.rows >= 1, "at least 1")
        check_row(self, "cols", self.cols)
        check_array(self, "rows", self.rows, "rows")
        self._check_valid(self.valid)

    def check_call(self, *, valid) -> None:
        """Refuse a call's `valid` before anything runs."""
        self._check_valid(valid)

    def _check_valid(self, valid):
        if valid is not None and not 1 <= valid <= self.cols:
            raise OperatorError(
                f"Softmax: valid={valid!r}: 1 to cols={self.cols} columns (or None for all)"
            )

    def tune(self, device):
        return default_array(self, device, self.rows)

    @staticmethod
    def design(rows, cols, num_aie_columns, num_channels, device):
        from iron.ops.eltwise import rows as row_designs  # loads iron.design on first use

        # `valid` is the design's runtime parameter "valid", the kernel's length
        return row_designs.softmax(rows, cols, num_aie_columns, num_channels, device)

    def reference(self, x, *, valid):
        self._check_valid(valid)
        n = self.cols if valid is None else int(valid)
        x = x.astype(np.float32)[:, :n]
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        y = np.zeros((self.rows, self.cols), np.float32)
        y[:, :n] = e / e.sum(axis=-1, keepdims=True)
        return y.astype(bf16)

    def tolerance(self, device=None, *, inputs=None):
        # the cores' exp is an approximation
        return approximated(device or self.device)
