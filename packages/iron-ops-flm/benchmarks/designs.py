"""FLMGemm's and DequantBFP's declared cases as designs on npu1 and npu2:
what each takes of the array (cores, the fullest core's and memtile's
memory, BDs), the checker's verdict or the operator's refusal, and the DDR
bytes the simulator moved on random data, B against its packed size
(K x N: K*N/8 blocks of 9 bytes, or K*N bf16).

    uv run python packages/iron-ops-flm/benchmarks/designs.py [--write-readme]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from iron.core import Device, OperatorError, compare
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.design import check, design_of, simulate, usage
from iron.ops.flm import design
from iron.ops.flm.dequant import DequantBFP, q4nx_size
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


DEQUANT_HEADER = [
    "device",
    "case",
    "check",
    "cores",
    "core memory B",
    "BDs core",
    "q read B",
    "q4nx size",
    "B written B",
    "packed B",
    "B",
]


def resolved(cls, case, device: Device, width: int):
    """The operator of `case` on `device`, or the table row of its refusal."""
    try:
        return cls(**case.params).resolve(device), None
    except OperatorError as refusal:
        return None, [device.name, case.label, f"refused: {refusal}", *["-"] * (width - 3)]


def footprint(design) -> tuple[str, list, list]:
    """(verdict, core tiles, memtiles) of a design."""
    report = check(design)
    tiles = usage(design).values()
    verdict = "ok" if report.ok else f"{len(report.violations)} violation(s)"
    return (
        verdict,
        [u for u in tiles if u.kind == "core"],
        [u for u in tiles if u.kind == "memtile"],
    )


def gemm_row(case, device: Device) -> list:
    op, refused = resolved(FLMGemm, case, device, len(HEADER))
    if refused:
        return refused
    verdict, cores, memtiles = footprint(design_of(op))
    a, b = op.example_inputs(np.random.default_rng(0))
    run = design.run(op, a, b)
    traffic = run.traffic.tensors
    within = compare(run["C"], op.reference(a, b), op.tolerance(inputs=(a, b))).passed
    return [
        device.name,
        case.label,
        verdict,
        len(cores),
        max(u.memory_bytes for u in cores),
        max(u.memory_bytes for u in memtiles),
        f"{max(u.bds for u in cores)} / {max(u.bds for u in memtiles)}",
        traffic["A"].read,
        traffic["B"].read,
        packed_b_size(op.K, op.N, op.b_format),
        traffic["C"].written,
        "within tolerance" if within else "OUTSIDE tolerance",
    ]


def dequant_row(case, device: Device) -> list:
    op, refused = resolved(DequantBFP, case, device, len(DEQUANT_HEADER))
    if refused:
        return refused
    built = design_of(op)
    verdict, cores, _ = footprint(built)
    (q,) = op.example_inputs(np.random.default_rng(0))
    run = simulate(built, {"q": q})
    exact = np.array_equal(run["B"].view(np.uint8).reshape(-1, 9), op.reference(q))
    return [
        device.name,
        case.label,
        verdict,
        len(cores),
        max(u.memory_bytes for u in cores),
        max(u.bds for u in cores),
        run.traffic.tensors["q"].read,
        q4nx_size(op.K, op.N),
        run.traffic.tensors["B"].written,
        packed_b_size(op.K, op.N),
        "byte for byte" if exact else "DIFFERS",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-readme", action="store_true", help="write the table into README")
    args = parser.parse_args(argv)
    devices = [Device.from_name(name) for name in ("npu1", "npu2")]
    gemm = [gemm_row(case, device) for device in devices for case in FLMGemm.cases]
    dequant = [dequant_row(case, device) for device in devices for case in DequantBFP.cases]
    text = markdown_table(HEADER, gemm) + "\n\n" + markdown_table(DEQUANT_HEADER, dequant)
    print(text)
    if args.write_readme:
        write_readme_section(README, "designs", text)
        print(f"wrote the table into {README.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
