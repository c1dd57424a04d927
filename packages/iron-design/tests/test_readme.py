"""The README's limit table says what `Device` holds (docs that drift are
worse than none). Its code blocks, the deadlock report they print
included, run in the workspace's README tests (`nox -s readmes`)."""

import re
from pathlib import Path

import pytest

from iron.core import Device

README = (Path(__file__).parents[1] / "README.md").read_text()
LIMIT_ROW = re.compile(
    r"^\| [^|]+ \| (?P<fields>`[^|]+) \| (?P<npu1>[^|]+) \| (?P<npu2>[^|]+) \| [^|]+ \|$", re.M
)


@pytest.mark.parametrize("row", list(LIMIT_ROW.finditer(README)), ids=lambda m: m["fields"])
def test_the_limit_table_says_what_the_device_holds(row):
    fields = re.findall(r"`(\w+)`", row["fields"])
    for device in ("npu1", "npu2"):
        values = [v.strip() for v in row[device].split("/")]
        actual = [str(getattr(Device.from_name(device), f)) for f in fields]
        assert values == actual, (device, fields)


def test_the_limit_table_is_complete():
    assert len(LIMIT_ROW.findall(README)) == 16


def test_the_lowered_tables_are_what_the_command_prints(capsys):
    from iron.core.cli import main

    shown = README.split("<!-- lowered:split_join -->\n```text\n", 1)[1].split("```", 1)[0]
    args = ["design", "example", "split_join", "workers=2", "n=1024", "tile=256", "--lowered"]
    assert main([*args, "--device", "npu1"]) == 0
    assert capsys.readouterr().out == shown
