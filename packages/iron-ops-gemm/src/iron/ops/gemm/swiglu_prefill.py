"""SwiGLUPrefill: a Llama MLP over a block of rows, recorded as GEMMs, SiLU
and a product."""

from __future__ import annotations

import attrs

from iron.core import IN, ArgSpec, Case, Composite, bf16
from iron.ops.eltwise.elementwise_mul import ElementwiseMul
from iron.ops.eltwise.silu import SiLU
from iron.ops.gemm.common import part_designs, resolved_parts
from iron.ops.gemm.gemm import GEMM


@attrs.frozen
class SwiGLUPrefill(Composite):
    """y = down(silu(gate(x)) * up(x)) for x (rows, embed). With
    `b_col_maj` (the default) the weights are read as shipped, [out, in]:
    w_gate and w_up (hidden, embed), w_down (embed, hidden), each the
    column-major B of a GEMM; nothing is transposed or copied. Without it
    they are [in, out]."""

    rows: int
    embed: int
    hidden: int
    b_col_maj: bool = True

    cases = (
        Case({"rows": 256, "embed": 128, "hidden": 512}),
        Case({"rows": 512, "embed": 192, "hidden": 256, "b_col_maj": False}),
    )

    @staticmethod
    def input_spec(rows, embed, hidden, b_col_maj, dtype=bf16):
        def weight(out, in_):
            return (out, in_) if b_col_maj else (in_, out)

        return [
            ArgSpec("x", (rows, embed), dtype, IN),
            ArgSpec("w_gate", weight(hidden, embed), dtype, IN),
            ArgSpec("w_up", weight(hidden, embed), dtype, IN),
            ArgSpec("w_down", weight(embed, hidden), dtype, IN),
        ]

    def parts(self) -> dict:
        """The five operators, resolved on this composite's device if it has one."""
        rows, embed, hidden, b_col_maj = self.rows, self.embed, self.hidden, self.b_col_maj
        return resolved_parts(
            self,
            lambda: {
                "gate": GEMM(M=rows, K=embed, N=hidden, b_col_maj=b_col_maj),
                "up": GEMM(M=rows, K=embed, N=hidden, b_col_maj=b_col_maj),
                "silu": SiLU(size=rows * hidden),
                "mul": ElementwiseMul(size=rows * hidden),
                "down": GEMM(M=rows, K=hidden, N=embed, b_col_maj=b_col_maj),
            },
        )

    def designs(self) -> dict:
        """The designs of the parts that have one, by role (see `part_designs`)."""
        return part_designs(self)

    def validate(self):
        self.parts()

    def expand(self, g, x, w_gate, w_up, w_down):
        parts = self.parts()
        gate = g(parts["gate"], x, w_gate)
        up = g(parts["up"], x, w_up)
        return g(parts["down"], g(parts["mul"], g(parts["silu"], gate), up), w_down)
