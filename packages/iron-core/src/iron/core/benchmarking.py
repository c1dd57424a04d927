"""What every package's benchmark script shares: timing a callable, a
markdown table, and writing the table into the package README between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` so the figures a README
shows are the ones the script last measured."""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from iron.core import files


def median_seconds(fn: Callable[[], object], *, budget: float = 0.3, at_least: int = 5) -> float:
    """Median wall time of `fn` over at least `at_least` runs and `budget` seconds."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < at_least or time.perf_counter() - start < budget:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def machine_note(how: str) -> str:
    """The line a README table's figures stand under: the machine, the
    Python that measured them and `how` (e.g. "best of repeats")."""
    python = ".".join(map(str, sys.version_info[:3]))
    return f"Measured on a shared 2-core machine, Python {python}, {how}:\n\n"


def write_readme_section(readme: Path, name: str, text: str) -> None:
    """Replace what stands between the README's `name` markers with `text`
    (the README read and rewritten whole, through `iron.core.files`: an
    interrupted run leaves it as it was)."""
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    body = files.read_text(readme)
    if begin not in body or end not in body:
        raise SystemExit(f"{readme} has no {begin} ... {end} markers")
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    with files.replacing(readme) as f:
        f.write(pattern.sub(lambda _: f"{begin}\n{text}\n{end}", body))


def reference_timings(cases, device) -> list[list[str]]:
    """Rows of (phase, label, input KiB, reference µs, ratio to a numpy copy
    of the same input bytes) for `cases` of (phase, label, operator,
    per-call values), each operator resolved for `device`: what the
    reference backend costs per step at those shapes."""
    import numpy as np

    rng = np.random.default_rng(0)
    rows = []
    for phase, label, op, values in cases:
        op = op.resolve(device)
        inputs = op.example_inputs(rng)
        read_bytes = sum(a.nbytes for a in inputs)
        source = np.ones(read_bytes, np.uint8)
        reference = median_seconds(
            lambda op=op, inputs=inputs, values=values: op.call_reference(*inputs, **values)
        )
        copy = median_seconds(source.copy)
        rows.append(
            [
                phase,
                label,
                f"{read_bytes / 1024:,.0f}",
                f"{reference * 1e6:,.0f}",
                f"{reference / copy:,.1f}",
            ]
        )
    return rows


REFERENCE_TIMINGS_HEADER = ("phase", "operator and shape", "input KiB", "reference µs", "vs copy")


def reference_timings_main(cases, readme: Path, description: str) -> None:
    """The command line of a family's reference-timings script: print the
    table for npu2, and with --write-readme put it into `readme`."""
    import argparse

    from iron.core.device import Device

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--write-readme", action="store_true", help="write the table into the README"
    )
    write = parser.parse_args().write_readme
    table = markdown_table(
        REFERENCE_TIMINGS_HEADER, reference_timings(cases, Device.from_name("npu2"))
    )
    print(table)
    if write:
        write_readme_section(readme, "reference-timings", table)
        print(f"wrote {readme}")
