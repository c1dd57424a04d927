"""FLMGemm's declared cases as designs on npu1 and npu2: what each takes of
the array (cores, the fullest core's and memtile's memory, BDs), the
checker's verdict or the operator's refusal, and the DDR bytes the
simulator moved on random data, B against its packed size (K x N).

    uv run python packages/iron-ops-flm/benchmarks/designs.py [--write-readme]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from iron.core import Device, OperatorError, compare
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.design import check, design_of, usage
from iron.ops.flm import design
from iron.ops.flm.gemm import FLMGemm
from iron.ops.flm.packing import packed_b_size

README = Path(__file__).parents[1] / "README.md"
HEADER = [
    "device",
    "case",
    "check",
    "cores",
    "core memory B",
    "memtile memory B",
    "BDs core / memtile",
    "A read B",
    "B read B",
    "packed B",
    "C written B",
    "C",
]


def row(case, device: Device) -> list:
    try:
        op = FLMGemm(**case.params).resolve(device)
    except OperatorError as refusal:
        return [device.name, case.label, f"refused: {refusal}", *["-"] * (len(HEADER) - 3)]
    built = design_of(op)
    report = check(built)
    tiles = usage(built).values()
    cores = [u for u in tiles if u.kind == "core"]
    memtiles = [u for u in tiles if u.kind == "memtile"]
    a, b = op.example_inputs(np.random.default_rng(0))
    run = design.run(op, a, b)
    traffic = run.traffic.tensors
    verdict = compare(run["C"], op.reference(a, b), op.tolerance(inputs=(a, b)))
    return [
        device.name,
        case.label,
        "ok" if report.ok else f"{len(report.violations)} violation(s)",
        len(cores),
        max(u.memory_bytes for u in cores),
        max(u.memory_bytes for u in memtiles),
        f"{max(u.bds for u in cores)} / {max(u.bds for u in memtiles)}",
        traffic["A"].read,
        traffic["B"].read,
        packed_b_size(op.K, op.N, op.b_format),
        traffic["C"].written,
        "within tolerance" if verdict.passed else "OUTSIDE tolerance",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-readme", action="store_true", help="write the table into README")
    args = parser.parse_args(argv)
    rows = [
        row(case, Device.from_name(name)) for name in ("npu1", "npu2") for case in FLMGemm.cases
    ]
    text = markdown_table(HEADER, rows)
    print(text)
    if args.write_readme:
        write_readme_section(README, "designs", text)
        print(f"wrote the table into {README.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
