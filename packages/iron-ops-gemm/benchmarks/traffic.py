"""GEMM's data movement as the simulator counts it: bytes through each shim
and memtile, per declared case and at Llama 3.2 1B's prefill shapes.

    uv run python packages/iron-ops-gemm/benchmarks/traffic.py [--write-readme]

Per design, simulated on random inputs: DDR bytes read (A, B) and written
(C); the shim tiles and memtiles A crosses; the bytes of the busiest shim
tile and of the busiest memtile (in plus out: what one tile's DMA channels
carry, the figure a column's bandwidth limits). --write-readme puts the
table into the package README between its gemm-traffic markers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from iron.core import Device, OperatorError
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.design import design_of, place, simulate
from iron.ops.gemm import GEMM

README = Path(__file__).parents[1] / "README.md"
LLAMA = {
    "Llama prefill q/o": {"M": 256, "K": 2048, "N": 2048, "b_col_maj": True},
    "Llama prefill down": {"M": 256, "K": 8192, "N": 2048, "b_col_maj": True},
}


def cases():
    for case in GEMM.cases:
        for name in ("npu1", "npu2"):
            yield case.label, case.params, Device.from_name(name)
    for label, params in LLAMA.items():
        for name in ("npu1", "npu2"):
            yield label, params, Device.from_name(name)


def inputs(op, rng) -> dict:
    given = {}
    for spec in op.arg_specs():
        if spec.reads:
            if np.dtype(spec.dtype).kind == "i":
                given[spec.name] = rng.integers(-128, 128, spec.shape).astype(spec.dtype)
            else:
                given[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
    return given


def a_tiles(design) -> tuple[int, int]:
    """(shim tiles, memtiles) A's fifos from the runtime pass through."""
    placed = place(design)
    links = {link.name: link.tile for link in placed.links}
    shims, memtiles = set(), set()
    for fifo in placed.fifos:
        if fifo.name.startswith("A") and fifo.producer.kind == "shim":
            shims.add(fifo.producer.tile)
            memtiles |= {links[c.name] for c in fifo.consumers}
    return len(shims), len(memtiles)


def row(label, params, device) -> list[str]:
    try:
        op = GEMM(**params).resolve(device)
    except OperatorError as refusal:
        return [label, device.name, f"refused: {str(refusal).split(': ', 2)[-1]}", "", "", "", ""]
    design = design_of(op)
    traffic = simulate(design, inputs(op, np.random.default_rng(0))).traffic
    moved = traffic.tensors
    busiest = {
        kind: max(b.read + b.written for t, b in traffic.tiles.items() if t.row == r)
        for kind, r in (("shim", 0), ("memtile", 1))
    }
    shims, memtiles = a_tiles(design)
    return [
        label,
        device.name,
        f"{moved['A'].read:,} / {moved['B'].read:,} / {moved['C'].written:,}",
        f"{shims} / {memtiles}",
        f"{busiest['shim']:,}",
        f"{busiest['memtile']:,}",
        str(max(f.depth for f in design.fifos if f.name.startswith("C") and "_" in f.name)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args(argv)
    header = ["case", "device", "DDR bytes: A read / B read / C written", "A's shims / memtiles",
              "busiest shim tile, bytes", "busiest memtile, bytes", "core C depth"]  # fmt: skip
    text = markdown_table(header, [row(*case) for case in cases()])
    print(text)
    if args.write_readme:
        write_readme_section(README, "gemm-traffic", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
