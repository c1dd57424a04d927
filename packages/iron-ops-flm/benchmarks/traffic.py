"""DDR traffic of FLMGemm's schedule (B resident in the memtile pool where
it fits) against the per-row-block schedule a B fifo gives (every slab
streamed: B read once per 256-row unit), summed from the access patterns of
each shape's design on npu2 (shapes too large to simulate here).

    uv run python packages/iron-ops-flm/benchmarks/traffic.py [--quick] [--write-readme]

--quick runs three shapes and also simulates one, checking that the
simulator's byte counters equal the sums of the transfers' patterns.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from iron.core import Device, compare
from iron.core.benchmarking import write_readme_section
from iron.ops.flm import design
from iron.ops.flm.gemm import FLMGemm

README = Path(__file__).parents[1] / "README.md"

# IRON's FLM GEMM benchmark suite (where it measured -23.9% median latency):
# every projection of Gemma 4 E2B (dim 1536, ffn 6144) and E4B (dim 2560,
# ffn 10240) at prefill lengths 256, 1024 and 2048.
GEMMA4 = {
    "E2B": [
        ("q", 1536, 4096),
        ("kv", 1536, 512),
        ("o", 4096, 1536),
        ("gateup", 1536, 6144),
        ("down", 6144, 1536),
    ],
    "E4B": [
        ("q", 2560, 4096),
        ("kv", 2560, 1024),
        ("o", 4096, 2560),
        ("gateup", 2560, 10240),
        ("down", 10240, 2560),
    ],
}
LLAMA_1B = [("q/o", 2048, 2048), ("k/v", 2048, 512), ("gate/up", 2048, 8192), ("down", 8192, 2048)]


def suite(quick: bool) -> list[tuple[str, int, int, int]]:
    shapes = [
        (f"{model_name} {proj} M{M}", M, K, N)
        for model_name, projections in GEMMA4.items()
        for M in (256, 1024, 2048)
        for proj, K, N in projections
    ]
    shapes += [(f"Llama-1B {proj} M{M}", M, K, N) for M in (256, 2048) for proj, K, N in LLAMA_1B]
    return [shapes[i] for i in (2, 13, 29)] if quick else shapes


def measure(name: str, M: int, K: int, N: int, device: Device) -> dict:
    op = FLMGemm(M=M, K=K, N=N).resolve(device)
    program = op.program()
    ours = design.transfer_bytes(design.build(op, program))
    naive = design.transfer_bytes(design.build(op, op.program(resident=False)))
    resident = sum(s.resident for s in program.slabs)
    return {
        "name": name,
        "shape": f"{M}x{K}x{N}",
        "schedule": f"resident x{resident}" if resident else "streamed",
        "a": ours["A"],
        "b": ours["B"],
        "b_naive": naive["B"],
        "c": ours["C"],
        "b_saving": 1 - ours["B"] / naive["B"],
        "total_saving": 1 - sum(ours.values()) / sum(naive.values()),
    }


def mb(n: int) -> str:
    return f"{n / 2**20:.1f}"


def table(rows: list[dict]) -> str:
    lines = [
        "| shape | M x K x N | B | A read MB | B read MB | naive B MB | C MB | B saving | DDR saving |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['name']} | {r['shape']} | {r['schedule']} | {mb(r['a'])} | {mb(r['b'])} | "
        f"{mb(r['b_naive'])} | {mb(r['c'])} | {r['b_saving']:.1%} | {r['total_saving']:.1%} |"
        for r in rows
    ]
    return "\n".join(lines)


def summary(rows: list[dict], label: str) -> str:
    b = [r["b_saving"] for r in rows]
    total = [r["total_saving"] for r in rows]
    return (
        f"{label} ({len(rows)} shapes): B read saving median {statistics.median(b):.1%} "
        f"(best {max(b):.1%}); all DDR traffic saving median {statistics.median(total):.1%} "
        f"(best {max(total):.1%})"
    )


def simulator_check(device: Device) -> str:
    """Simulate one resident shape: the simulator's byte counters must equal
    the patterns' sums, and C the reference within the tolerance."""
    op = FLMGemm(M=512, K=1536, N=1024).resolve(device)
    a, b = op.example_inputs(np.random.default_rng(0))
    run = design.run(op, a, b)
    measured = {name: moved.read + moved.written for name, moved in run.traffic.tensors.items()}
    counted = design.transfer_bytes(run.design)
    if measured != counted or not compare(run["C"], op.reference(a, b), op.tolerance()).passed:
        raise SystemExit(f"simulator check failed: measured {measured}, counted {counted}")
    return f"simulator check (512x1536x1024): measured {measured}, equal to the patterns' sums"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three shapes and a model check")
    parser.add_argument("--write-readme", action="store_true", help="write the table into README")
    args = parser.parse_args(argv)
    device = Device.from_name("npu2")
    rows = [measure(*shape, device) for shape in suite(args.quick)]
    gemma = [r for r in rows if not r["name"].startswith("Llama")]
    llama = [r for r in rows if r["name"].startswith("Llama")]
    text = table(rows) + "\n\n" + summary(gemma, "Gemma 4 suite")
    if llama:
        text += "  \n" + summary(llama, "Llama 3.2 1B")
    print(text)
    if args.quick:
        print(simulator_check(device))
    if args.write_readme:
        write_readme_section(README, "traffic", text)
        print(f"wrote the table into {README.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
