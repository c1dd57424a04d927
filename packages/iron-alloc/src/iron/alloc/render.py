"""Pictures of a plan: time across, bytes up, one rectangle per buffer.

`render_text` for a terminal, `render_svg` (no dependency) for a browser or
a document, `render_png` with matplotlib (the `plot` extra).
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from xml.sax.saxutils import escape

from .files import replacing, write_target
from .liveness import LiveRange, peak_live_bytes
from .planner import Plan

_SYMBOLS = string.ascii_uppercase + string.ascii_lowercase + string.digits
_OTHER = "+"  # a buffer beyond the 62 that get their own symbol
_FREE = "."


def _by_size(ranges: Mapping[str, LiveRange], sizes: Mapping[str, int]) -> list[str]:
    return sorted((name for name in ranges if sizes[name] > 0), key=lambda n: (-sizes[n], n))


def render_text(
    plan: Plan,
    ranges: Mapping[str, LiveRange],
    sizes: Mapping[str, int],
    width: int = 80,
    height: int = 16,
) -> str:
    """The plan as text, like TFLite Micro's PrintMemoryPlan turned on its side.

    Columns are steps (scaled down to at most `width` columns), rows are
    bytes (`height` rows, highest bytes first). A cell shows the letter of
    the largest buffer touching it, `.` when free. The 62 largest buffers get
    letters `A-Z a-z 0-9`, any others `+`; the legend after the picture maps
    letters to names, steps, offsets and sizes. The first line gives the
    arena size against the lower bound, and a `<` after the row that holds
    the lower bound marks where a perfect plan would end.
    """
    if width < 1 or height < 1:
        raise ValueError(f"render_text: width and height must be >= 1, got {width}x{height}")
    lower = peak_live_bytes(ranges, sizes)
    ratio = f"{plan.size / lower:.3f}x" if lower else "n/a"
    lines = [f"arena {plan.size:,} B, lower bound {lower:,} B ({ratio}), {len(ranges)} buffers"]
    named = _by_size(ranges, sizes)
    if not named or plan.size == 0:
        return "\n".join([*lines, "(nothing to draw)"])

    first = min(ranges[n].begin for n in named)
    last = max(ranges[n].end for n in named)
    steps = last - first + 1
    columns = min(width, steps)
    grid = [[_FREE] * columns for _ in range(height)]
    symbol = {name: _SYMBOLS[k] if k < len(_SYMBOLS) else _OTHER for k, name in enumerate(named)}

    def column(step: int) -> int:
        return (step - first) * columns // steps

    def row(byte: int) -> int:
        return min(byte * height // plan.size, height - 1)

    for name in reversed(named):  # largest last, so it wins a shared cell
        live, offset = ranges[name], plan.offsets[name]
        for c in range(column(live.begin), column(live.end) + 1):
            for r in range(row(offset), row(offset + sizes[name] - 1) + 1):
                grid[height - 1 - r][c] = symbol[name]

    label_width = len(f"{plan.size:,}")
    lower_row = height - 1 - row(max(lower - 1, 0))
    for r, cells in enumerate(grid):
        label = f"{plan.size:,}" if r == 0 else "0" if r == height - 1 else ""
        marker = " < lower bound" if r == lower_row else ""
        lines.append(f"{label:>{label_width}} |{''.join(cells)}|{marker}")
    left, right = f"step {first}", f"step {last}"
    gap = " " * max(columns - len(left) - len(right), 1)
    lines.append(f"{'':>{label_width}}  {left}{gap}{right}")
    for name in named[: len(_SYMBOLS)]:
        live = ranges[name]
        lines.append(
            f"{symbol[name]} {name}: steps [{live.begin}, {live.end}], "
            f"bytes [{plan.offsets[name]:,}, {plan.offsets[name] + sizes[name]:,})"
        )
    if len(named) > len(_SYMBOLS):
        lines.append(f"{_OTHER} {len(named) - len(_SYMBOLS)} smaller buffers")
    return "\n".join(lines)


def render_png(
    plan: Plan,
    ranges: Mapping[str, LiveRange],
    sizes: Mapping[str, int],
    path: str | Path,
    labels: int = 12,
    title: str | None = None,
) -> Path:
    """Draw the plan to a PNG at `path` and return the path.

    Each buffer is a rectangle from its first step to its last (inclusive)
    and over its bytes; the `labels` largest carry their names. Dashed lines
    mark the lower bound and the arena size. Needs matplotlib (the `plot`
    extra: `pip install 'iron-npu-alloc[plot]'`).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import PolyCollection
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "render_png needs matplotlib: install the plot extra, `pip install 'iron-npu-alloc[plot]'`"
        ) from error

    write_target(Path(path))  # before any drawing
    named = _by_size(ranges, sizes)
    lower = peak_live_bytes(ranges, sizes)
    figure = Figure(figsize=(10, 5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    boxes = []
    for name in named:
        live, offset = ranges[name], plan.offsets[name]
        x0, x1, y0, y1 = live.begin, live.end + 1, offset, offset + sizes[name]
        boxes.append([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
    colours = [f"C{k % 10}" for k in range(len(boxes))]
    axes.add_collection(
        PolyCollection(boxes, facecolors=colours, edgecolors="black", linewidths=0.3, alpha=0.8)
    )
    for name in named[:labels]:
        live, offset = ranges[name], plan.offsets[name]
        axes.text(
            (live.begin + live.end + 1) / 2,
            offset + sizes[name] / 2,
            name,
            ha="center",
            va="center",
            fontsize=7,
            clip_on=True,
        )
    first = min((ranges[n].begin for n in named), default=0)
    last = max((ranges[n].end for n in named), default=0) + 1
    axes.axhline(
        lower, color="black", linestyle="--", linewidth=1, label=f"lower bound {lower:,} B"
    )
    axes.axhline(plan.size, color="red", linestyle=":", linewidth=1, label=f"arena {plan.size:,} B")
    axes.set_xlim(first, last)
    axes.set_ylim(0, max(plan.size, lower, 1) * 1.15)  # room for the legend
    axes.set_xlabel("step")
    axes.set_ylabel("bytes")
    axes.set_title(title or f"{len(named)} buffers, {plan.strategy}")
    axes.legend(loc="upper right", fontsize=8)
    path = Path(path)
    with replacing(path) as partial:  # a FIFO or a device there is refused, never written
        figure.savefig(partial, format="png")
    return path


#: fills for the kinds of buffer, in order of first appearance (colour-blind safe)
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1")
_MARGIN = {"left": 86, "right": 150, "top": 44, "bottom": 40}


def render_svg(
    plan: Plan,
    ranges: Mapping[str, LiveRange],
    sizes: Mapping[str, int],
    path: str | Path | None = None,
    *,
    kinds: Mapping[str, str] | None = None,
    marks: Sequence[tuple[int, str]] = (),
    title: str | None = None,
    labels: int = 12,
    width: int = 960,
    height: int = 480,
) -> str:
    """The plan as an SVG picture (returned, and written to `path` if given).

    Time runs across (a step is a column), bytes up; each buffer is a
    rectangle from its first step to its last and over its bytes, filled
    by its kind (`kinds[name]`, e.g. "weights", "states", "transients";
    "buffers" where none is given; colours in the order the kinds first
    appear in `kinds`), with its name, steps and bytes as a
    tooltip; the `labels` largest carry their names where they fit. Dashed
    lines mark the lower bound and the arena's size, `marks` are labelled
    vertical lines at steps (where one image ends and the next begins),
    and the legend gives each kind's colour and bytes. A buffer thinner
    than a pixel is drawn one pixel high, so nothing placed is invisible.
    """
    if width < 200 or height < 120:
        raise ValueError(f"render_svg: width and height must be >= 200 x 120, got {width}x{height}")
    kinds = kinds or {}
    named = _by_size(ranges, sizes)
    lower = peak_live_bytes(ranges, sizes)
    left, top = _MARGIN["left"], _MARGIN["top"]
    plot_w = width - left - _MARGIN["right"]
    plot_h = height - top - _MARGIN["bottom"]
    first = min((ranges[n].begin for n in named), default=0)
    last = max((ranges[n].end for n in named), default=0)
    steps = last - first + 1
    top_bytes = max(plan.size, lower, 1)

    def x(step: float) -> float:
        return left + (step - first) * plot_w / steps

    def y(byte: float) -> float:
        return top + plot_h - byte * plot_h / top_bytes

    present = {kinds.get(n, "buffers") for n in named}
    order = [k for k in dict.fromkeys([*kinds.values(), "buffers"]) if k in present]
    fill = {kind: PALETTE[k % len(PALETTE)] for k, kind in enumerate(order)}
    heading = title or f"{len(named)} buffers, {plan.strategy}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(heading)}</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="{top - 24}" font-size="14">{escape(heading)}</text>',
        f'<text x="{left}" y="{top - 8}">arena {_bytes(plan.size)}, lower bound '
        f"{_bytes(lower)}{f' ({plan.size / lower:.3f}x)' if lower else ''}</text>",
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#f7f7f7" '
        'stroke="#888"/>',
    ]
    if not named or plan.size == 0:
        out.append(f'<text x="{left + 8}" y="{top + 20}">(nothing to draw)</text>')
    for name in reversed(named):  # the largest last, on top
        live, offset, size = ranges[name], plan.offsets[name], sizes[name]
        x0, x1 = x(live.begin), x(live.end + 1)
        y1 = y(offset)
        h = max(y1 - y(offset + size), 1.0)
        tip = (
            f"{name} ({kinds.get(name, 'buffers')}): steps [{live.begin}, {live.end}], bytes "
            f"[{offset:,}, {offset + size:,}), {_bytes(size)}"
        )
        out.append(
            f'<rect x="{x0:.2f}" y="{y1 - h:.2f}" width="{x1 - x0:.2f}" height="{h:.2f}" '
            f'fill="{fill[kinds.get(name, "buffers")]}" stroke="white" stroke-width="0.3">'
            f"<title>{escape(tip)}</title></rect>"
        )
    for name in named[:labels]:
        live, offset, size = ranges[name], plan.offsets[name], sizes[name]
        x0, x1, y0, y1 = x(live.begin), x(live.end + 1), y(offset), y(offset + size)
        if x1 - x0 >= 7 * len(name) and y0 - y1 >= 13:
            out.append(
                f'<text x="{(x0 + x1) / 2:.2f}" y="{(y0 + y1) / 2 + 4:.2f}" '
                f'text-anchor="middle" fill="white">{escape(name)}</text>'
            )
    for value, label, dash, colour in (
        (lower, "lower bound", "6 3", "black"),
        (plan.size, "arena", "2 2", "#c00"),
    ):
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.2f}" y2="{y(value):.2f}" '
            f'stroke="{colour}" stroke-dasharray="{dash}"/>'
        )
        out.append(
            f'<text x="{left + plot_w + 4}" y="{y(value) + 4:.2f}" fill="{colour}">{label}</text>'
        )
    for step, label in marks:
        out.append(
            f'<line x1="{x(step):.2f}" x2="{x(step):.2f}" y1="{top}" y2="{top + plot_h}" '
            'stroke="#444" stroke-dasharray="4 2"/>'
        )
        out.append(f'<text x="{x(step) + 3:.2f}" y="{top + 12}">{escape(label)}</text>')
    for k in range(5):  # bytes up
        value = top_bytes * k / 4
        out.append(
            f'<text x="{left - 6}" y="{y(value) + 4:.2f}" text-anchor="end">{_bytes(value)}</text>'
        )
    for step in dict.fromkeys(first + round((steps - 1) * k / 5) for k in range(6)):  # across
        out.append(
            f'<text x="{x(step + 0.5):.2f}" y="{top + plot_h + 16}" text-anchor="middle">'
            f"{step}</text>"
        )
    out.append(f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">step</text>')
    totals = {kind: 0 for kind in order}
    for name in named:
        totals[kinds.get(name, "buffers")] += sizes[name]
    for k, kind in enumerate(order):
        at = top + 40 + 18 * k
        out.append(
            f'<rect x="{left + plot_w + 4}" y="{at - 10}" width="12" height="12" '
            f'fill="{fill[kind]}"/>'
        )
        out.append(
            f'<text x="{left + plot_w + 20}" y="{at}">{escape(kind)} {_bytes(totals[kind])}</text>'
        )
    out.append("</svg>")
    text = "\n".join(out) + "\n"
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def _bytes(count: float) -> str:
    """A byte count as people read it: 512 B, 1.5 KiB, 2.47 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.0f} B"
