"""How long each reference takes on the host at Llama 3.2 1B shapes (the
reference backend runs the model on them), against a numpy copy of the
operator's input bytes measured in the same run. The decode attention
operators read only the valid prefix of the cache: their cost follows the
context length, not the cache's size.

    uv run --package iron-ops-gemm python packages/iron-ops-gemm/benchmarks/reference_timings.py [--write]

--write puts the table into the package README between its
reference-timings markers.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

import numpy as np

from iron.core import Device
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


def median_seconds(fn, budget: float = 0.3, at_least: int = 5) -> float:
    times, start = [], time.perf_counter()
    while len(times) < at_least or time.perf_counter() - start < budget:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure() -> list[list[str]]:
    npu2 = Device.from_name("npu2")
    rng = np.random.default_rng(0)
    rows = []
    for phase, label, op, values in CASES:
        op = op.resolve(npu2)
        inputs = op.example_inputs(rng)
        read_bytes = sum(a.nbytes for a in inputs)
        source = np.ones(read_bytes, np.uint8)
        reference = median_seconds(
            lambda op=op, inputs=inputs, values=values: op.call_reference(*inputs, **values)
        )
        copy = median_seconds(lambda source=source: source.copy())
        rows.append([phase, label, f"{read_bytes / 1024:,.0f}", f"{reference * 1e6:,.0f}",
                     f"{reference / copy:,.1f}"])  # fmt: skip
    return rows


def markdown(rows: list[list[str]]) -> str:
    header = ["phase", "operator and shape", "input KiB", "reference µs", "vs copy"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the table into the README")
    table = markdown(measure())
    print(table)
    if parser.parse_args().write:
        text = README.read_text()
        marked = re.compile(r"(<!-- reference-timings -->\n).*?(<!-- /reference-timings -->)", re.S)
        README.write_text(marked.sub(lambda m: m[1] + table + "\n" + m[2], text))
        print(f"wrote {README}")


if __name__ == "__main__":
    main()
