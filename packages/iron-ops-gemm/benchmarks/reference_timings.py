"""How long each reference takes on the host at Llama 3.2 1B shapes (the
reference backend runs the model on them), against a numpy copy of the
operator's input bytes measured in the same run. The decode attention
operators read only the valid prefix of the cache: their cost follows the
context length, not the cache's size.

    uv run --package iron-npu-ops-gemm python packages/iron-ops-gemm/benchmarks/reference_timings.py [--write-readme]

--write-readme puts the table into the package README between its
reference-timings markers.
"""

from __future__ import annotations

from pathlib import Path

from iron.core.benchmarking import reference_timings_main
from iron.ops.gemm import GEMM, GEMV, MHA, GQAContext, GQAScores

README = Path(__file__).parents[1] / "README.md"
PROMPT = 256  # prefill rows
ATTENTION = {"heads": 32, "kv_heads": 8, "head_dim": 64, "max_seq_len": 2048}

CASES = [
    ("decode", "GEMV, q projection 2048 x 2048", GEMV(M=2048, K=2048), {}),
    ("decode", "GEMV, k projection 512 x 2048", GEMV(M=512, K=2048), {}),
    ("decode", "GEMV, gate projection 8192 x 2048", GEMV(M=8192, K=2048), {}),
    ("decode", "GEMV, down projection 2048 x 8192", GEMV(M=2048, K=8192), {}),
    ("decode", "GQAScores, 2048-position cache, 101 valid", GQAScores(**ATTENTION), {"valid": 101}),
    ("decode", "GQAScores, 2048-position cache, all valid", GQAScores(**ATTENTION), {}),
    ("decode", "GQAContext, 2048-position cache, 101 valid", GQAContext(**ATTENTION),
     {"valid": 101}),
    ("decode", "GQAContext, 2048-position cache, all valid", GQAContext(**ATTENTION), {}),
    ("prefill", f"GEMM, q projection {PROMPT} x 2048 x 2048",
     GEMM(M=PROMPT, K=2048, N=2048, b_col_maj=True), {}),
    ("prefill", f"GEMM, gate projection {PROMPT} x 2048 x 8192",
     GEMM(M=PROMPT, K=2048, N=8192, b_col_maj=True), {}),
    ("prefill", f"MHA, 32 heads in 8 groups x {PROMPT} rows",
     MHA(num_heads=32, seq_len=PROMPT, num_kv_heads=8, heads_interleaved=True, num_pipelines=4),
     {}),
]  # fmt: skip


if __name__ == "__main__":
    reference_timings_main(CASES, README, __doc__.splitlines()[0])
