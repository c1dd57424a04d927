"""Simulator speed: the known-answer designs at sizes up to 1M elements on
npu1, each run checked against its numpy answer.

    uv run python packages/iron-design/benchmarks/simulate.py [--quick] [--write-readme]

Objects counts the objects the runtime's fills send; seconds is the median
of several runs of `simulate` (placement, checks and the run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from iron.core import Device
from iron.core.benchmarking import markdown_table, median_seconds, write_readme_section
from iron.design import examples
from iron.design.lower import lower
from iron.design.model import Fill
from iron.design.simulate import simulate

README = Path(__file__).parents[1] / "README.md"
M = 2**20


def cases(quick: bool):
    """(label, design, inputs, expected y) at each size."""
    rng = np.random.default_rng(0)
    npu1 = Device.from_name("npu1")
    for n, tile in [(2**16, 1024), (M, 4096), (M, 1024), (M, 256)][: 2 if quick else None]:
        x = rng.integers(-(2**30), 2**30, n, dtype=np.int32)
        yield f"add_one, {tile}-element objects", examples.add_one(npu1, n, tile), x, x + 1
    if quick:
        return
    x = rng.integers(-(2**30), 2**30, M, dtype=np.int32)
    yield "passthrough, 4096", examples.passthrough(npu1, M, 4096), x, x
    yield "split_join, 4 cores, 1024", examples.split_join(npu1, M, 1024, 4), x, x + 1
    square = x.reshape(1024, 1024)
    yield "transpose, 1024 x 1024", examples.transpose(npu1, 1024, 1024), square, square.T
    # the memtile's lock counts every send of its one object: at most max_lock_value
    piece = x[: M // 32]
    yield "repeat, 32768 x 32", examples.repeat(npu1, M // 32, 32), piece, np.tile(piece, 32)


def objects(design) -> int:
    return sum(
        t.tap.count // design.fifo(t.statement.fifo).size
        for t in lower(design).runtime.tasks
        if isinstance(t.statement, Fill)
    )


def measure(quick: bool) -> str:
    rows = []
    for label, design, x, expected in cases(quick):
        np.testing.assert_array_equal(simulate(design, {"x": x})["y"], expected)
        seconds = median_seconds(lambda d=design, x=x: simulate(d, {"x": x}), at_least=3)
        elements = expected.size
        rows.append(
            [
                label,
                f"{elements:,}",
                f"{objects(design):,}",
                f"{seconds:.3f}",
                f"{elements / seconds:,.0f}",
            ]
        )
    return markdown_table(["design", "elements out", "objects in", "seconds", "elements/s"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small add_one runs")
    parser.add_argument(
        "--write-readme", action="store_true", help=f"write the table into {README.name}"
    )
    args = parser.parse_args(argv)
    text = measure(args.quick)
    print(text)
    if args.write_readme:
        write_readme_section(README, "simulate", text)
        print(f"wrote the table into {README.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
