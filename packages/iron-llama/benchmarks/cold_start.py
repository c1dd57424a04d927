"""What a person waits for before the model runs: whole commands, each a
fresh process, timed side by side in one run.

- Second process: `iron-llama generate` on the tiny synthetic model with
  `--backend cpu` against the same command with `--backend reference`,
  alternating (the host kernels are compiled already: the cpu side pays
  for importing numba and loading the compiled kernels).
- Demo: `iron-llama demo` in a fresh cache (nothing written, nothing
  compiled: what a first run after a clone waits for, the venv aside)
  against the next run in that cache.

    uv run --package iron-npu-llama python packages/iron-llama/benchmarks/cold_start.py [--rounds 5] [--write-readme]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from iron.core.benchmarking import write_readme_section

README = Path(__file__).parents[1] / "README.md"
CLI = [sys.executable, "-m", "iron.llama.cli"]


def timed(command: list[str], env: dict) -> float:
    """Seconds `command` took, start to exit; it must succeed."""
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="pairs of generate commands")
    parser.add_argument("--tokens", type=int, default=20, help="tokens each generate draws")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="iron-cold-") as work:
        env = {**os.environ, "IRON_CACHE_HOME": str(Path(work) / "cache")}
        started = time.perf_counter()
        first = timed([*CLI, "-q", "demo"], env)
        second = timed([*CLI, "-q", "demo"], env)
        model = Path(work) / "cache" / "models" / "tiny"
        generate = [*CLI, "-q", "generate", "-m", str(model), "-p", "Iron is the fourth",
                    "-n", str(args.tokens), "--temp", "0"]  # fmt: skip
        seconds = {"cpu": [], "reference": []}
        for _ in range(args.rounds):
            for backend in seconds:
                seconds[backend].append(timed([*generate, "--backend", backend], env))
        took = time.perf_counter() - started
    cpu, reference = (float(np.median(seconds[b])) for b in ("cpu", "reference"))
    ratios = sorted(c / r for c, r in zip(seconds["cpu"], seconds["reference"]))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = "\n".join(
        [
            f"Whole commands, each a fresh process, in one run of {took:.0f} s (load average "
            f"{load:.1f} at its end):",
            "",
            "| what | seconds | against | ratio (goal) |",
            "|---|---|---|---|",
            f"| `iron-llama generate` on the tiny model, `--backend cpu`, {args.tokens} tokens "
            f"(median of {args.rounds}) | {cpu:.2f} | the same on `reference`: {reference:.2f} | "
            f"{cpu / reference:.2f}x, pairs {ratios[0]:.2f}-{ratios[-1]:.2f}x (<= 1.5x) |",
            f"| `iron-llama demo`, first run in a fresh cache (writes the model, compiles "
            f"designs and host kernels) | {first:.1f} | the next run: {second:.1f} | "
            f"{first / second:.2f}x (<= 1.5x) |",
        ]
    )
    print(text)
    if args.write_readme:
        write_readme_section(README, "cold", text)
        print(f"wrote {README}", file=sys.stderr)


if __name__ == "__main__":
    main()
