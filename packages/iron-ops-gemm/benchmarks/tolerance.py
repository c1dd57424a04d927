"""How much of GEMM's tolerance floor plausible device numerics use, and how
much garbage the floor lets through, per reduction depth K.

Each device model computes C = A @ B for standard-normal bf16 A (256, K) and
B (K, 128) and is judged against the operator's reference: the floor it
needs is max(|device - reference| - 0.04 |reference|) / mass, with mass =
K mean|A| mean|B|. Models: the designs' models of mm.cc's arithmetic
(`core_kernels.block_product`, 8-deep blocks into a float32 accumulator):
aie2p's bf16 emulated through bfp16 (both operands through
`iron.design.block_float.quantize`), aie2's bf16; and, for contrast, a
design that rounds its partial sums to bf16 between 64-deep slices (IRON's
GEMM without prio_accuracy), which the reference's one rounding does not
allow for.
"garbage passed" is the share of elements an all-zero output would pass.

    uv run --package iron-npu-ops-gemm python packages/iron-ops-gemm/benchmarks/tolerance.py [--write-readme]

--write-readme puts the table into the package README between its tolerance markers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from iron.core import Device, bf16, compare
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.design.block_float import quantize
from iron.ops.gemm.core_kernels import block_product
from iron.ops.gemm.gemm import GEMM

README = Path(__file__).parents[1] / "README.md"
DEPTHS = (16, 64, 256, 1024, 4096)
SLICE = 64


def sliced(a: np.ndarray, b: np.ndarray, round_between: bool) -> np.ndarray:
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(0, a.shape[1], SLICE):
        acc = acc + a[:, k : k + SLICE] @ b[k : k + SLICE]
        if round_between:
            acc = acc.astype(bf16).astype(np.float32)
    return acc.astype(bf16)


def mm_cc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    zeros = np.zeros((a.shape[0], b.shape[1]), np.float32)
    return block_product(a.astype(np.float32), b.astype(np.float32), zeros).astype(bf16)


MODELS = [
    ("npu2", "mm.cc, bf16 via bfp16", lambda a, b: mm_cc(quantize(a, 1), quantize(b, 0))),
    ("npu1", "mm.cc, bf16", mm_cc),
    ("npu1", "bf16 partial sums between slices", lambda a, b: sliced(
        a.astype(np.float32), b.astype(np.float32), round_between=True)),
]  # fmt: skip


def measure() -> list[list[str]]:
    rng = np.random.default_rng(0)
    rows = []
    for K in DEPTHS:
        a = rng.standard_normal((256, K)).astype(bf16)
        b = rng.standard_normal((K, 128)).astype(bf16)
        op = GEMM(256, K, 128, tile_k=min(K, 64))
        (reference,) = op.call_reference(a, b)
        expected = reference.astype(np.float64)
        mass = K * np.mean(np.abs(a.astype(np.float64))) * np.mean(np.abs(b.astype(np.float64)))
        for device, label, model in MODELS:
            tolerance = op.tolerance(Device.from_name(device), inputs=(a, b))
            got = model(a, b).astype(np.float64)
            needed = np.max(np.abs(got - expected) - 0.04 * np.abs(expected)) / mass
            zeros = compare(np.zeros_like(reference), reference, tolerance)
            garbage = 1 - zeros.n_mismatch / reference.size
            rows.append([str(K), device, label, f"{max(needed, 0):.1e}",
                         f"{tolerance.atol / mass:.0e}",
                         "yes" if compare(got.astype(bf16), reference, tolerance) else "**no**",
                         f"{garbage:.1%}"])  # fmt: skip
    return rows


HEADER = ("K", "device", "model", "floor needed / mass", "budget", "passes", "garbage passed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write-readme", action="store_true", help="write the table into the README"
    )
    table = markdown_table(HEADER, measure())
    print(table)
    if parser.parse_args().write_readme:
        write_readme_section(README, "tolerance", table)
        print(f"wrote {README}")


if __name__ == "__main__":
    main()
