"""How long each reference takes on the host at Llama 3.2 1B shapes (the
reference backend runs the model on them), against a numpy copy of the
operator's input bytes measured in the same run.

    uv run --package iron-npu-ops-eltwise python packages/iron-ops-eltwise/benchmarks/reference_timings.py [--write-readme]

--write-readme puts the table into the package README between its
reference-timings markers.
"""

from __future__ import annotations

from pathlib import Path

from iron.core.benchmarking import reference_timings_main
from iron.ops.eltwise import (
    Dequant,
    ElementwiseAdd,
    ElementwiseMul,
    RMSNorm,
    RoPE,
    SiLU,
    Softmax,
    StridedCopy,
)

README = Path(__file__).parents[1] / "README.md"
PROMPT = 256  # prefill rows

CASES = [
    ("decode", "RMSNorm, hidden 2048", RMSNorm(size=2048, tile_size=2048, weighted=True), {}),
    ("decode", "RoPE, 32 query heads", RoPE(rows=32, cols=64, angle_rows=1), {}),
    ("decode", "StridedCopy, keys into a 2048-position cache",
     StridedCopy(input_buffer_size=512, output_buffer_size=2048 * 512, sizes=(512,),
                 strides=(1,)), {"out_offset": 100 * 512}),
    ("decode", "Softmax, 32 heads x 2048, 101 valid", Softmax(rows=32, cols=2048),
     {"valid": 101}),
    ("decode", "SiLU, 8192", SiLU(size=8192), {}),
    ("decode", "ElementwiseMul, 8192", ElementwiseMul(size=8192), {}),
    ("decode", "ElementwiseAdd, 2048", ElementwiseAdd(size=2048), {}),
    ("prefill", f"RMSNorm, {PROMPT} x 2048",
     RMSNorm(size=PROMPT * 2048, tile_size=2048, weighted=True), {}),
    ("prefill", f"RoPE, {PROMPT} x 32 heads", RoPE(rows=PROMPT * 32, cols=64, angle_rows=PROMPT), {}),
    ("prefill", f"SiLU, {PROMPT} x 8192", SiLU(size=PROMPT * 8192), {}),
    ("prefill", "Dequant, one 2048 x 8192 matrix", Dequant(size=2048 * 8192), {}),
]  # fmt: skip


if __name__ == "__main__":
    reference_timings_main(CASES, README, __doc__.splitlines()[0])
