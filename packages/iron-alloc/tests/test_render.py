import importlib.util
import sys
import xml.etree.ElementTree as ET

import pytest

from iron.alloc import LiveRange, place, render_png, render_svg, render_text
from iron.alloc.render import PALETTE

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


# ---- SVG ----

SVG = "{http://www.w3.org/2000/svg}"


def svg_buffers(text):
    """Each buffer rectangle of an SVG picture: its tooltip's first word -> (x, y, w, h, fill)."""
    root = ET.fromstring(text)
    boxes = {}
    for rect in root.iter(f"{SVG}rect"):
        tip = rect.find(f"{SVG}title")
        if tip is not None:
            geometry = tuple(float(rect.get(k)) for k in ("x", "y", "width", "height"))
            boxes[tip.text.split(" ")[0]] = (*geometry, rect.get("fill"))
    return root, boxes


def test_svg_picture_puts_each_buffer_at_its_steps_and_bytes(tmp_path):
    plan = chain_plan()
    kinds = {"t0": "weights", "t2": "states"}
    text = render_svg(
        plan, RANGES, SIZES, tmp_path / "plan.svg", kinds=kinds, width=600, height=300
    )
    assert (tmp_path / "plan.svg").read_text() == text
    root, boxes = svg_buffers(text)
    assert root.tag == f"{SVG}svg" and set(boxes) == set(NAMES)
    # the plot is 600 - 86 - 150 = 364 px across 6 steps, 300 - 44 - 40 = 216 px over 96 bytes
    step_px, byte_px = 364 / 6, 216 / 96
    for name in NAMES:
        x, y, w, h, _ = boxes[name]
        live, offset = RANGES[name], plan.offsets[name]
        assert x == pytest.approx(86 + live.begin * step_px, abs=0.01)
        assert w == pytest.approx(len(live) * step_px, abs=0.01)
        assert h == pytest.approx(SIZES[name] * byte_px, abs=0.01)
        assert y + h == pytest.approx(44 + 216 - offset * byte_px, abs=0.01)  # bytes up
    # kinds in the order `kinds` names them, then "buffers"; the legend says each one's bytes
    assert [boxes[n][4] for n in ("t0", "t2", "t1")] == list(PALETTE[:3])
    legend = [
        t.text
        for t in root.iter(f"{SVG}text")
        if t.text and t.text.startswith(("weights", "states", "buffers"))
    ]
    assert legend == ["weights 16 B", "states 64 B", "buffers 48 B"]


def test_svg_picture_escapes_names_marks_steps_and_keeps_thin_buffers_visible():
    ranges = {"<a&b>": LiveRange(0, 3), "tiny": LiveRange(1, 2)}
    sizes = {"<a&b>": 1 << 20, "tiny": 1}
    plan = place(ranges, sizes, strategy="greedy")
    text = render_svg(plan, ranges, sizes, marks=[(2, "decode <v2>")], title="x & y")
    root, boxes = svg_buffers(text)  # parses: names are escaped
    assert set(boxes) == {"<a&b>", "tiny"} and boxes["tiny"][3] == 1.0  # a pixel, not nothing
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "decode <v2>" in texts and "x & y" in texts
    assert any(t.startswith("arena 1 MiB, lower bound 1 MiB") for t in texts if t)


def test_svg_picture_of_nothing_and_of_a_bad_size():
    root = ET.fromstring(render_svg(place({}, {}), {}, {}))
    assert "(nothing to draw)" in [t.text for t in root.iter(f"{SVG}text")]
    with pytest.raises(ValueError, match="width and height must be >= 200 x 120, got 100x480"):
        render_svg(chain_plan(), RANGES, SIZES, width=100)
