"""The README's per-device table says what resolution does (docs that drift
are worse than none); its code blocks run in the workspace's README tests."""

import re
from pathlib import Path

import pytest

import iron.ops.eltwise as eltwise
from iron.core import Device

README = (Path(__file__).parents[1] / "README.md").read_text()
TABLE_ROW = re.compile(r"^\| `(?P<op>[^`]+)`[^|]*\| (?P<npu1>\d+) \| (?P<npu2>\d+) \|$", re.M)


@pytest.mark.parametrize("row", list(TABLE_ROW.finditer(README)), ids=lambda m: m["op"])
def test_readme_per_device_columns(row):
    op = eval(row["op"], {name: getattr(eltwise, name) for name in eltwise.__all__})
    for device in ("npu1", "npu2"):
        assert op.resolve(Device.from_name(device)).num_aie_columns == int(row[device])


def test_readme_per_device_table_is_complete():
    assert len(TABLE_ROW.findall(README)) == 9
