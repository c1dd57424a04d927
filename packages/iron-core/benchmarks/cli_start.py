"""How long the `iron` command takes to answer, against the floor of any
iron command: a Python that imports iron.core. Each command runs in a
fresh process, interleaved round by round (the machine is noisy: a ratio
measured in one run is what counts); the table gives the medians.

    uv run python packages/iron-core/benchmarks/cli_start.py [--rounds N] [--write-readme]

The goal (issue 30): `iron doctor` and `iron ops list` within 3x of
`python -c "import iron.core"`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from iron.core.benchmarking import markdown_table, write_readme_section

README = Path(__file__).resolve().parents[1] / "README.md"
GOAL = 3.0
IRON = str(Path(sys.executable).with_name("iron"))
COMMANDS = {
    'python -c "import iron.core"': [sys.executable, "-c", "import iron.core"],
    "iron ops list": [IRON, "ops", "list"],
    "iron doctor": [IRON, "doctor"],
}


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(rounds: int) -> dict[str, list[float]]:
    for command in COMMANDS.values():  # once each first: the page cache, not the command
        seconds(command)
    times: dict[str, list[float]] = {label: [] for label in COMMANDS}
    for _ in range(rounds):
        for label, command in COMMANDS.items():
            times[label].append(seconds(command))
    return times


def table(times: dict[str, list[float]]) -> str:
    floor = statistics.median(next(iter(times.values())))
    rows = []
    for label, runs in times.items():
        median = statistics.median(runs)
        ratio = median / floor
        verdict = "" if label.startswith("python") else ("met" if ratio <= GOAL else "NOT met")
        rows.append([f"`{label}`", f"{median * 1000:.0f}", f"{ratio:.2f}x", verdict])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    header = ["command", "ms (median)", "/ import iron.core", f"goal <= {GOAL:g}x"]
    note = (
        f"\n\nMedians of {len(runs)} interleaved rounds, each command a fresh process "
        f"(load average {load:.1f} on {os.cpu_count()} cores)."
    )
    return markdown_table(header, rows) + note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args(argv)
    text = table(measure(args.rounds))
    print(text)
    if args.write_readme:
        write_readme_section(README, "cli-start", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
