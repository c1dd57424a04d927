"""SwiGLUDecode: a Llama MLP for one token, recorded as GEMVs, SiLU and a
product."""

from __future__ import annotations

import attrs

from iron.core import IN, ArgSpec, Case, Composite, bf16
from iron.ops.eltwise.elementwise_mul import ElementwiseMul
from iron.ops.eltwise.silu import SiLU
from iron.ops.gemm.common import part_designs, resolved_parts
from iron.ops.gemm.gemv import GEMV


@attrs.frozen
class SwiGLUDecode(Composite):
    """y = down(silu(gate(x)) * up(x)) for x (embed,). The weights are read
    as shipped, [out, in]: w_gate and w_up (hidden, embed), w_down (embed,
    hidden), each the A of a GEMV; nothing is transposed or copied."""

    embed: int
    hidden: int

    cases = (
        Case({"embed": 256, "hidden": 512}),
        Case({"embed": 2048, "hidden": 8192}),  # Llama 3.2 1B
    )

    @staticmethod
    def input_spec(embed, hidden, dtype=bf16):
        return [
            ArgSpec("x", (embed,), dtype, IN),
            ArgSpec("w_gate", (hidden, embed), dtype, IN),
            ArgSpec("w_up", (hidden, embed), dtype, IN),
            ArgSpec("w_down", (embed, hidden), dtype, IN),
        ]

    def parts(self) -> dict:
        """The five operators, resolved on this composite's device if it has one."""
        return resolved_parts(
            self,
            lambda: {
                "gate": GEMV(M=self.hidden, K=self.embed),
                "up": GEMV(M=self.hidden, K=self.embed),
                "silu": SiLU(size=self.hidden),
                "mul": ElementwiseMul(size=self.hidden),
                "down": GEMV(M=self.embed, K=self.hidden),
            },
        )

    def designs(self) -> dict:
        """The designs of the parts that have one, by role (see `part_designs`)."""
        return part_designs(self)

    def validate(self):
        self.parts()

    def expand(self, g, x, w_gate, w_up, w_down):
        parts = self.parts()
        gate = g(parts["gate"], w_gate, x)
        up = g(parts["up"], w_up, x)
        return g(parts["down"], w_down, g(parts["mul"], g(parts["silu"], gate), up))
