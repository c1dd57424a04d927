import importlib.util
import sys

import pytest

from iron.alloc import LiveRange, place, render_png, render_text

NAMES = ["t0", "t1", "t2", "t3", "t4"]
RANGES = {n: LiveRange(k, k + 1) for k, n in enumerate(NAMES)}
SIZES = dict(zip(NAMES, [16, 8, 64, 32, 8], strict=True))


def chain_plan():
    plan = place(RANGES, SIZES, alignment=1, strategy="greedy")
    assert [plan.offsets[n] for n in NAMES] == [0, 64, 0, 64, 0]
    return plan


def test_text_picture_of_the_tflite_chain():
    # 6 steps -> 6 columns; 12 rows of 8 bytes. Letters by size: t2 A, t3 B, t0 C, t1 D, t4 E
    lines = render_text(chain_plan(), RANGES, SIZES, width=80, height=12).splitlines()
    assert lines[0] == "arena 96 B, lower bound 96 B (1.000x), 5 buffers"
    expected = [
        "96 |...BB.| < lower bound",
        "   |...BB.|",
        "   |...BB.|",
        "   |.DDBB.|",
        *["   |..AA..|"] * 6,
        "   |CCAA..|",
        " 0 |CCAAEE|",
    ]
    assert lines[1:13] == expected
    assert lines[13].split() == ["step", "0", "step", "5"]
    assert lines[14:] == [
        "A t2: steps [2, 3], bytes [0, 64)",
        "B t3: steps [3, 4], bytes [64, 96)",
        "C t0: steps [0, 1], bytes [0, 16)",
        "D t1: steps [1, 2], bytes [64, 72)",
        "E t4: steps [4, 5], bytes [0, 8)",
    ]


def test_text_picture_scales_time_to_the_width_and_marks_the_lower_bound():
    ranges = {f"b{k}": LiveRange(10 * k, 10 * k + 14) for k in range(100)}
    sizes = {f"b{k}": 1000 + k for k in range(100)}
    plan = place(ranges, sizes, strategy="greedy")
    lines = render_text(plan, ranges, sizes, width=40, height=8).splitlines()
    grid = [line.split("|")[1] for line in lines[1:9]]
    assert all(len(row) == 40 for row in grid)
    assert sum("lower bound" in line for line in lines[1:9]) == 1
    assert lines[-1] == "+ 38 smaller buffers"


def test_text_picture_of_nothing():
    assert render_text(place({}, {}), {}, {}).endswith("(nothing to draw)")
    with pytest.raises(ValueError, match="width and height must be >= 1, got 0x16"):
        render_text(chain_plan(), RANGES, SIZES, width=0)


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="render_png needs matplotlib (the plot extra)",
)
def test_png_picture(tmp_path):
    path = render_png(chain_plan(), RANGES, SIZES, tmp_path / "plan.png")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1000, 500)


def test_png_without_matplotlib_says_how_to_get_it(monkeypatch, tmp_path):
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    with pytest.raises(ImportError, match=r"render_png needs matplotlib: install the plot extra"):
        render_png(chain_plan(), RANGES, SIZES, tmp_path / "plan.png")
    assert not (tmp_path / "plan.png").exists()
