"""Simulator speed: the known-answer designs at sizes up to 1M elements on
npu1, each run checked against its numpy answer, against np.copyto of the
same bytes.

    uv run python packages/iron-design/benchmarks/simulate.py [--quick] [--write-readme]

Objects counts the objects the runtime's fills send. `simulate` is one call
(lowering, placement, checks and the machine's run); `Simulator.run` a
later run of a `Simulator` made once, which replays the machine's record.
"x copy" divides each by the time np.copyto takes to copy every byte of the
run's tensors (inputs and outputs) between arrays allocated beforehand:
the three are timed in turn, round after round, and a ratio is the median
over rounds of each round's time against that round's copy, so what runs
beside slows both sides of it alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from iron.core import Device
from iron.core.benchmarking import markdown_table, write_readme_section
from iron.design import examples
from iron.design.lower import lower
from iron.design.model import Fill
from iron.design.simulate import Simulator, simulate

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


def interleaved(functions, rounds: int) -> list[list[float]]:
    """Seconds of each function in each round, the functions timed in turn."""
    times: list[list[float]] = [[] for _ in functions]
    for _ in range(rounds):
        for fn, spent in zip(functions, times):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return times


def measure(quick: bool) -> str:
    rows = []
    for label, design, x, expected in cases(quick):
        simulator = Simulator(design)
        for run in (simulate(design, {"x": x}), simulator.run({"x": x}), simulator.run({"x": x})):
            np.testing.assert_array_equal(run["y"], expected)
        targets = [np.empty_like(x), np.empty_like(expected)]

        def copy(x=x, y=expected, targets=targets):
            np.copyto(targets[0], x)
            np.copyto(targets[1], y)

        once, replayed, copied = interleaved(
            [
                lambda d=design, x=x: simulate(d, {"x": x}),
                lambda s=simulator, x=x: s.run({"x": x}),
                copy,
            ],
            rounds=3 if quick else 15,
        )

        def ratio(times, copied=copied):  # each round's time against that round's copy
            return statistics.median(t / c for t, c in zip(times, copied))

        rows.append(
            [
                label,
                f"{expected.size:,}",
                f"{objects(design):,}",
                f"{1000 * statistics.median(once):.1f}",
                f"{ratio(once):.0f}x",
                f"{1000 * statistics.median(replayed):.1f}",
                f"{ratio(replayed):.0f}x",
            ]
        )
    header = ["design", "elements out", "objects in", "simulate ms", "x copy",
              "Simulator.run ms", "x copy"]  # fmt: skip
    return markdown_table(header, rows)


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
