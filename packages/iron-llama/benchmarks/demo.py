"""What `iron-llama demo` prints on a first run, for the README: the demo
run in a fresh cache (so it writes its model, as a new user's first run
does), stdout and stderr as a terminal shows them, the cache's place shown
as the default one.

    uv run --package iron-npu-llama python packages/iron-llama/benchmarks/demo.py [--write-readme]

The README's test runs the demo the same way and compares its output with
this sample, figures that change from run to run (times, speeds, memory)
aside: anything else that moves (steps, tokens, text, accuracy) makes the
sample stale.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-readme", action="store_true", help="put the sample in the README")
    args = parser.parse_args()
    output = first_run()
    print(output, end="")
    if args.write_readme:
        from iron.core.benchmarking import write_readme_section

        write_readme_section(README, "demo", f"```text output\n{output.rstrip()}\n```")
        print(f"wrote the sample into {README}", file=sys.stderr)


if __name__ == "__main__":
    main()
