"""The README's design table is what benchmarks/designs.py prints now."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_readme_design_table_is_current():
    spec = importlib.util.spec_from_file_location("designs", ROOT / "benchmarks" / "designs.py")
    designs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(designs)
    readme = (ROOT / "README.md").read_text()
    section = readme.split("<!-- bench:designs -->")[1].split("<!-- /bench:designs -->")[0]
    assert section.strip() == designs.table().strip(), (
        "regenerate: uv run python packages/iron-ops-eltwise/benchmarks/designs.py --write-readme"
    )
