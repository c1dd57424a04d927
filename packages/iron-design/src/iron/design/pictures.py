"""A picture of a placed design, as SVG text (no dependency; any browser
opens it): the array's tiles by column, shim at the bottom, the memtile
above it, the cores above that; each fifo an arrow from its producer's tile
to each consumer's, named with its depth and object size (dashed where two
cores share the pool and no DMA moves it); in every tile what runs or links
there, and bars of its memory, locks, BDs and DMA channels against the
device's limits (`usage` on the lowered form, `device.limits`). What
`check` finds is red: the tile's frame, the bar past its limit, and the
violations listed below the array. Given a deadlock's `blocked` records,
the fifos they wait on are red and the blocked actors are listed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape

from iron.design.check import check
from iron.design.lower import emitted_depth, endpoint_tile, lower, shared_memory_tile
from iron.design.model import Design, Drain, Fill, Tile, require_design
from iron.design.simulate import Blocked
from iron.design.usage import MM2S, S2MM, tile_usage

TILE_W, TILE_H = 240, 150
GAP_X, GAP_Y = 110, 90
MARGIN, TOP = 30, 76
LINE = 15  # px per text line below the array
#: a tile kind's colour (its header band), as iron-alloc's plan pictures colour kinds
KIND_COLOUR = {"core": "#4e79a7", "memtile": "#59a14f", "shim": "#f28e2b"}
BAR, OVER, ARROW, BLOCKED = "#76b7b2", "#e15759", "#555", "#e15759"


def design_svg(
    design: Design,
    path: str | Path | None = None,
    *,
    blocked: Sequence[Blocked] = (),
    title: str | None = None,
) -> str:
    """The picture of `design` (placed first) as SVG text, also written to
    `path` if given. `blocked`: a `DeadlockError`'s records, whose fifos are
    marked and whose lines are listed."""
    require_design("design_svg", design)
    lowered = lower(design)
    design, device = lowered.design, lowered.design.device
    used = tile_usage(lowered)
    report = check(design)
    tiles = set(used)
    tiles |= {w.tile for w in design.workers} | {k.tile for k in design.links}
    first = min(t.col for t in tiles)
    last = max(t.col for t in tiles)
    top_row = max(device.rows - 1, *(t.row for t in tiles))

    def box(tile: Tile) -> tuple[float, float]:
        return (
            MARGIN + (tile.col - first) * (TILE_W + GAP_X),
            TOP + (top_row - tile.row) * (TILE_H + GAP_Y),
        )

    faults: dict[Tile, list] = defaultdict(list)
    for violation in report.violations:
        faults[violation.tile].append(violation)
    blocked_fifos = {b.fifo for b in blocked if b.fifo}

    notes = _notes(report, blocked)
    heading = title or f"design {design.name} on {device.name} ({device.columns} columns)"
    grid_w = MARGIN + (last - first + 1) * (TILE_W + GAP_X) + 100  # the last bends' labels
    grid_h = TOP + (top_row + 1) * (TILE_H + GAP_Y) - GAP_Y
    longest = max([len(heading), *(len(t) + 2 * indent for t, _, indent in notes)])
    width = max(grid_w, min(1800, 40 + 7 * longest))
    height = grid_h + 24 + LINE * len(notes) + MARGIN
    verdict = "fits the device" if report.ok else f"{len(report.violations)} violation(s)"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(heading)}</title>",
        "<defs>",
        *(
            f'<marker id="{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="{colour}"/></marker>'
            for name, colour in (("arrow", ARROW), ("blocked", BLOCKED))
        ),
        "</defs>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{MARGIN}" y="28" font-size="15">{escape(heading)}</text>',
        f'<text x="{MARGIN}" y="48" fill="{"#2a7a2a" if report.ok else OVER}">'
        f"{escape(verdict)}{'; deadlock: ' + str(len(blocked)) + ' blocked' if blocked else ''}"
        "</text>",
    ]
    for col in range(first, last + 1):
        for row in range(top_row + 1):
            tile = Tile(col, row)
            out += _tile(design, tile, box(tile), used.get(tile), faults.get(tile, ()))
    out += _fifos(design, box, blocked_fifos)
    y = grid_h + 24
    for text, colour, indent in notes:
        x = MARGIN + 14 * indent
        out.append(f'<text x="{x}" y="{y}" fill="{colour}">{escape(text)}</text>')
        y += LINE
    out.append("</svg>")
    text = "\n".join(out) + "\n"
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def _notes(report, blocked) -> list[tuple[str, str, int]]:
    """The lines below the array (text, colour, indent): violations, then
    blocked actors (an idle one grey)."""
    notes = []
    if report.violations:
        notes.append(("violations:", OVER, 0))
        notes += [(str(v), OVER, 1) for v in report.violations]
    if blocked:
        notes.append(("blocked, as the deadlock report lists them:", BLOCKED, 0))
        notes += [(str(b), "#777" if b.idle else BLOCKED, 1) for b in blocked]
    return notes


def _tile(design: Design, tile: Tile, at, used, faults) -> list[str]:
    x, y = at
    kind = design.device.tile_kind(tile.row) if tile.row < design.device.rows else "core"
    if used is None and not faults:
        return [
            f'<rect x="{x}" y="{y}" width="{TILE_W}" height="{TILE_H}" fill="#fafafa" '
            f'stroke="#ccc" stroke-dasharray="4 3"/>',
            f'<text x="{x + 8}" y="{y + 16}" fill="#aaa">{kind} {tile}</text>',
        ]
    frame = OVER if faults else "#888"
    out = [
        f'<rect x="{x}" y="{y}" width="{TILE_W}" height="{TILE_H}" fill="#f7f7f7" '
        f'stroke="{frame}" stroke-width="{3 if faults else 1}">'
        f"<title>{escape(_tip(tile, kind, used, faults))}</title></rect>",
        f'<rect x="{x}" y="{y}" width="{TILE_W}" height="22" fill="{KIND_COLOUR[kind]}"/>',
        f'<text x="{x + 8}" y="{y + 15}" fill="white" font-weight="bold">{kind} {tile}</text>',
    ]
    for k, line in enumerate(_contents(design, tile, kind)[:2]):
        out.append(f'<text x="{x + 8}" y="{y + 38 + 14 * k}">{escape(_fit(line, 34))}</text>')
    if used is None:
        return out
    limits = design.device.limits(kind)
    bars = [
        ("memory", used.memory_bytes, limits.memory_bytes, _bytes),
        ("locks", used.lock_count, limits.locks, str),
        ("BDs", used.bds, limits.bds, str),
        ("S2MM", len(used.channels_in(S2MM)), limits.dma_channels, str),
        ("MM2S", len(used.channels_in(MM2S)), limits.dma_channels, str),
    ]
    row_y = y + 70
    for label, found, limit, shown in bars:
        if not limit:  # a shim's memory is DDR: no bar
            continue
        share = found / limit
        w = 80 * min(share, 1.0)
        colour = OVER if share > 1 else BAR
        out += [
            f'<text x="{x + 8}" y="{row_y + 9}">{label}</text>',
            f'<rect x="{x + 58}" y="{row_y}" width="80" height="10" fill="white" stroke="#aaa"/>',
            f'<rect x="{x + 58}" y="{row_y}" width="{w:.1f}" height="10" fill="{colour}"/>',
            f'<text x="{x + 144}" y="{row_y + 9}" fill="{OVER if share > 1 else "black"}">'
            f"{shown(found)}/{shown(limit)}</text>",
        ]
        row_y += 15
    return out


def _contents(design: Design, tile: Tile, kind: str) -> list[str]:
    """What runs or links on `tile`, in a line or two."""
    if kind == "core":
        return [
            f"{w.name}: {', '.join(dict.fromkeys(c.kernel.symbol for c in w.calls()))}"
            for w in design.workers
            if w.tile == tile
        ]
    if kind == "memtile":
        return [
            f"{k.kind} {k.name}: {', '.join(k.sources)} -> {', '.join(k.destinations)}"
            for k in design.links
            if k.tile == tile
        ]
    fills, drains = {}, {}  # as dicts: in order, once each
    for statement in design.sequence:
        if not isinstance(statement, (Fill, Drain)):
            continue
        fifo = design.fifo(statement.fifo)
        if not any(e.kind == "shim" and e.tile == tile for e in (fifo.producer, *fifo.consumers)):
            continue
        if isinstance(statement, Fill):
            fills[f"{statement.tensor}->{fifo.name}"] = None
        else:
            drains[f"{fifo.name}->{statement.tensor}"] = None
    lines = [f"fills {', '.join(fills)}"] if fills else []
    return lines + ([f"drains {', '.join(drains)}"] if drains else [])


def _tip(tile: Tile, kind: str, used, faults) -> str:
    lines = [f"{kind} {tile}"]
    if used is not None:
        lines.append(used.memory_text() or "no memory")
        lines += [str(c) for c in used.channels]
    lines += [str(v) for v in faults]
    return "\n".join(lines)


def _fifos(design: Design, box, blocked: set[str]) -> list[str]:
    """An arrow per fifo and consumer. Arrows between neighbours in a column
    run side by side, their labels stacked beside them; one that passes
    other tiles of its column bends into the gap to their right (each bend
    a lane of its own); one across columns runs side to side."""
    edges = [
        (fifo, endpoint_tile(design, fifo.producer), endpoint_tile(design, consumer))
        for fifo in design.fifos
        for consumer in fifo.consumers
    ]
    pairs: dict[frozenset, list[int]] = defaultdict(list)
    bends: dict[int, list[int]] = defaultdict(list)
    for i, (_, a, b) in enumerate(edges):
        if a.col == b.col and abs(a.row - b.row) > 1:
            bends[a.col].append(i)
        else:
            pairs[frozenset((a, b))].append(i)
    out = []
    for i, (fifo, a, b) in enumerate(edges):
        (ax, ay), (bx, by) = box(a), box(b)
        if a.col == b.col and abs(a.row - b.row) > 1:
            lane = bends[a.col].index(i)
            x0, x1 = ax + TILE_W, bx + TILE_W
            y0, y1 = ay + 30 + 10 * lane, by + 30 + 10 * lane
            bend = x0 + 14 + 7 * lane
            d = f"M{x0},{y0} C{bend},{y0} {bend},{y1} {x1},{y1}"
            at = (x0 + 14 + 7 * len(bends[a.col]), (y0 + y1) / 2 + 12 * lane, "start")
        elif a.col == b.col:
            group = pairs[frozenset((a, b))]
            lane = group.index(i)
            x = ax + 30 + 24 * lane
            y0, y1 = (ay, by + TILE_H) if b.row > a.row else (ay + TILE_H, by)
            d = f"M{x},{y0} L{x},{y1}"
            gap = min(y0, y1)
            at = (
                ax + 30 + 24 * len(group) - 10,
                gap + 6 + (GAP_Y - 12) * (lane + 1) / (len(group) + 1) + 4,
                "start",
            )
        else:
            group = pairs[frozenset((a, b))]
            lane = group.index(i)
            x0, x1 = (ax + TILE_W, bx) if b.col > a.col else (ax, bx + TILE_W)
            y0, y1 = ay + 40 + 16 * lane, by + 40 + 16 * lane
            d = f"M{x0},{y0} L{x1},{y1}"
            at = ((x0 + x1) / 2, (y0 + y1) / 2 - 3, "middle")
        stuck = fifo.name in blocked
        colour = BLOCKED if stuck else ARROW
        dashed = ' stroke-dasharray="5 3"' if shared_memory_tile(design, fifo) else ""
        depth = emitted_depth(fifo)
        depth_text = "/".join(map(str, depth)) if isinstance(depth, tuple) else str(depth)
        label = f"{fifo.name} {depth_text} x {_bytes(fifo.nbytes)}" + (" blocked" if stuck else "")
        tip = (
            f"fifo {fifo.name}: {a} -> {b}, depth {depth_text}, objects of {fifo.shape} "
            f"{fifo.dtype} ({fifo.nbytes} B)"
        )
        out += [
            f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="{2.5 if stuck else 1.4}"'
            f'{dashed} marker-end="url(#{"blocked" if stuck else "arrow"})">'
            f"<title>{escape(tip)}</title></path>",
            f'<text x="{at[0]:.1f}" y="{at[1]:.1f}" text-anchor="{at[2]}" fill="{colour}" '
            f'font-size="10" stroke="white" stroke-width="3" paint-order="stroke">'
            f"{escape(label)}</text>",
        ]
    return out


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _bytes(count: float) -> str:
    """A byte count as people read it: 512 B, 64 KiB, 1.5 MiB."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{int(count)} B"
