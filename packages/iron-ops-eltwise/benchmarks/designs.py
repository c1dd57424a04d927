"""What each eltwise design takes of the array: every declared case of every
registered eltwise operator that has a design, on npu1 and npu2.

    uv run python packages/iron-ops-eltwise/benchmarks/designs.py [--write-readme]

Cores are the worker tiles; L1 is the most any one core holds (stack and
fifo buffers) against the core memory; memtile bytes are summed over the
memtiles used; shim BDs are the most buffer descriptors one shim tile has
live at once (of its 16); the verdict is `iron.design.check`'s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from iron.core import Device
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.design import check, usage
from iron.design.operators import catalog_designs

README = Path(__file__).parents[1] / "README.md"
DEVICES = ("npu1", "npu2")


def row(entry) -> list[str]:
    device = entry.device
    label = f"{entry.operator}({entry.case})"
    if entry.design is None:
        return [label, device.name, "", "", "", "", f"refused: {entry.refusal}"]
    tiles = usage(entry.design).values()
    cores = [t for t in tiles if t.kind == "core"]
    l1 = max((t.memory_bytes for t in cores), default=0)
    memtile = sum(t.memory_bytes for t in tiles if t.kind == "memtile")
    shim_bds = max((t.bds for t in tiles if t.kind == "shim"), default=0)
    report = check(entry.design)
    verdict = "ok" if report.ok else f"{len(report.violations)} violations: {report.violations[0]}"
    return [
        label,
        device.name,
        str(len(cores)),
        f"{l1:,} / {device.core_bytes:,}",
        f"{memtile:,}",
        f"{shim_bds} / {device.bd_ids_per_shim}",
        verdict,
    ]


def table() -> str:
    rows = [
        row(entry)
        for name in DEVICES
        for entry in catalog_designs(Device.from_name(name), "eltwise")
    ]
    rows.sort(key=lambda r: (r[0], r[1]))
    header = ["operator (case)", "device", "cores", "L1 B per core", "memtile B", "shim BDs"]
    return markdown_table([*header, "check"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--write-readme", action="store_true", help=f"write the table into {README.name}"
    )
    args = parser.parse_args(argv)
    text = table()
    print(text)
    if args.write_readme:
        write_readme_section(README, "designs", text)
        print(f"wrote the table into {README.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
