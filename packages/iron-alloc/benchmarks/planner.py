"""Planner benchmark: the public traces in ./data and a random graph.

    python benchmarks/planner.py [--quick] [--data DIR] [--seed S] [--random N] [--write-readme]

Runs `iron.alloc.bench` with this folder's data; see that module for what
is measured. --write-readme puts the report into the package README between
its bench:planner markers.
"""

import sys
from pathlib import Path

from iron.alloc import bench

HERE = Path(__file__).resolve().parent
README = HERE.parent / "README.md"


def main() -> int:
    parser = bench.parser(default_data=HERE / "data")
    parser.add_argument("--write-readme", action="store_true", help="write the report into README")
    args = parser.parse_args()
    text = bench.report(args)
    print()
    print(text)
    if args.write_readme:
        # the one README writer of every package's benchmarks; iron-alloc
        # itself depends on numpy only, the repository has iron-core too
        from iron.core.benchmarking import write_readme_section

        command = " ".join(["python benchmarks/planner.py", *sys.argv[1:]])
        write_readme_section(README, "planner", f"Command: `{command}`\n\n{text}")
        print(f"wrote {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
