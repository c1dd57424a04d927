"""Planner benchmark: the public traces in ./data and a random graph.

    python benchmarks/planner.py [--quick] [--data DIR] [--seed S] [--random N] [--write-readme]

Runs `iron.alloc.bench` with this folder's data and the package README as
defaults; see that module for what is measured.
"""

import sys
from pathlib import Path

from iron.alloc.bench import main

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    sys.exit(main(default_data=HERE / "data", default_readme=HERE.parent / "README.md"))
