"""iron.alloc: liveness-based buffer planning.

    steps -> live_ranges / touch_ranges -> place -> Plan -> check, render_text / render_svg
    ArenaPlan: one growing arena shared by every image of a graph

Depends on numpy only; `render_png` needs the `plot` extra (matplotlib).
"""

from .arena import ArenaPlan
from .check import OverlapError, check
from .liveness import LiveRange, live_ranges, peak_live_bytes, touch_ranges
from .planner import DEFAULT_BUDGET, DEFAULT_GAP, Allocation, Plan, align_up, place
from .render import render_png, render_svg, render_text

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_GAP",
    "Allocation",
    "ArenaPlan",
    "LiveRange",
    "OverlapError",
    "Plan",
    "align_up",
    "check",
    "live_ranges",
    "peak_live_bytes",
    "place",
    "render_png",
    "render_svg",
    "render_text",
    "touch_ranges",
]
