"""How long each reference takes on the host at Llama 3.2 1B shapes (the
reference backend runs the model on them), against a numpy copy of the
operator's input bytes measured in the same run.

    uv run --package iron-ops-eltwise python packages/iron-ops-eltwise/benchmarks/reference_timings.py [--write]

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
