"""Pictures of a plan: time across, bytes up, one rectangle per buffer."""

from __future__ import annotations

import string
from collections.abc import Mapping
from pathlib import Path

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
    figure.savefig(path)
    return path
