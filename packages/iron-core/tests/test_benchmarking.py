import re
from pathlib import Path

import pytest

from iron.core.benchmarking import markdown_table, median_seconds, write_readme_section


def test_markdown_table():
    assert (
        markdown_table(("a", "b"), [(1, "x"), (2, "y")])
        == "| a | b |\n|---|---|\n| 1 | x |\n| 2 | y |"
    )


def test_median_seconds_runs_at_least_the_asked_number():
    calls = []
    assert median_seconds(lambda: calls.append(1), budget=0.0, at_least=7) >= 0
    assert len(calls) == 7


def test_readme_section_is_replaced_between_its_markers(tmp_path: Path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- bench:host -->\nold\n<!-- /bench:host -->\nafter\n")
    write_readme_section(readme, "host", "| new |")
    assert (
        readme.read_text() == "intro\n<!-- bench:host -->\n| new |\n<!-- /bench:host -->\nafter\n"
    )
    with pytest.raises(
        SystemExit, match=re.escape("no <!-- bench:other --> ... <!-- /bench:other --> markers")
    ):
        write_readme_section(readme, "other", "x")
