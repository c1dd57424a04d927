"""The README's example runs as written, and its per-device table says what
resolution does (docs that drift are worse than none)."""

import re
from pathlib import Path

import pytest

import iron.ops.eltwise as eltwise
from iron.core import Device

README = (Path(__file__).parents[1] / "README.md").read_text()
TABLE_ROW = re.compile(r"^\| `(?P<op>[^`]+)`[^|]*\| (?P<npu1>\d+) \| (?P<npu2>\d+) \|$", re.M)


def test_readme_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "in    angles (1, 64) bf16" in out and "key_cache" in out


@pytest.mark.parametrize("row", list(TABLE_ROW.finditer(README)), ids=lambda m: m["op"])
def test_readme_per_device_columns(row):
    op = eval(row["op"], {name: getattr(eltwise, name) for name in eltwise.__all__})
    for device in ("npu1", "npu2"):
        assert op.resolve(Device.from_name(device)).num_aie_columns == int(row[device])


def test_readme_per_device_table_is_complete():
    assert len(TABLE_ROW.findall(README)) == 9
