"""The README's design tables are what benchmarks/designs.py measures now."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

ROOT = Path(__file__).parents[1]


def section(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- bench:{name} -->\n(.*?)\n<!-- /bench:{name} -->", text, re.S)
    assert found, f"README.md has no {name} section"
    return found.group(1)


def test_readme_tables_are_current():
    script = runpy.run_path(str(ROOT / "benchmarks" / "designs.py"))
    assert section("designs") == script["measure"]()
    assert section("design-numerics") == script["numerics"]()


def test_every_declared_case_is_in_the_table_and_none_breaks_a_limit():
    rows = [line.split(" | ") for line in section("designs").splitlines()[2:]]
    verdicts = [r[-1].rstrip(" |") for r in rows]
    assert all(v == "ok" or v.startswith("refused: ") for v in verdicts)
    assert sum(v == "ok" for v in verdicts) >= 40
