"""What `iron-llama demo` prints on a first run, for the README: the demo
run in a fresh cache (so it writes its model, as a new user's first run
does), stdout and stderr as a terminal shows them, the cache's place shown
as the default one.

    uv run --package iron-npu-llama python packages/iron-llama/benchmarks/demo.py [--write-readme]

The README's test runs the demo the same way and compares its output with
this sample, figures that change from run to run (times, speeds, memory)
aside: anything else that moves (steps, tokens, text, accuracy) makes the
sample stale. One exception: the `cpu` column's text after it parts from
the `sim` column's is left out (`...`), since those tokens follow float32
sums whose order the host's BLAS picks for its CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def first_run() -> str:
    """The demo's output in a cache of its own, its path shown as the user's default."""
    cache = Path(tempfile.mkdtemp(prefix="iron-demo-"))
    try:
        script = Path(sys.executable).parent / "iron-llama"
        env = {**os.environ, "IRON_CACHE_HOME": str(cache), "PYTHONUNBUFFERED": "1"}
        env.pop("IRON_BACKEND", None)
        result = subprocess.run(
            [str(script), "demo"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=True,
        )
        return result.stdout.replace(str(cache), "~/.cache/iron")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def elide_cpu_tail(output: str) -> str:
    """`output` with the cpu column's text cut where it parts from sim's."""
    lines = output.split("\n")
    sim = lines.index(next(line for line in lines if "sim: 40 tokens" in line)) + 1
    cpu = lines.index(next(line for line in lines if "cpu: 40 tokens" in line)) + 1
    agree = next(
        (i for i, (a, b) in enumerate(zip(lines[sim], lines[cpu], strict=False)) if a != b),
        None,
    )
    if agree is not None:
        lines[cpu] = lines[cpu][:agree] + "..."
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-readme", action="store_true", help="put the sample in the README")
    args = parser.parse_args()
    output = elide_cpu_tail(first_run())
    print(output, end="")
    if args.write_readme:
        from iron.core.benchmarking import write_readme_section

        write_readme_section(README, "demo", f"```text output\n{output.rstrip()}\n```")
        print(f"wrote the sample into {README}", file=sys.stderr)


if __name__ == "__main__":
    main()
