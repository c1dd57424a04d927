"""Pictures of a graph function: its arena plan as SVG (parsed, and drawn by
a real renderer), and a traced call as Chrome trace-event JSON."""

import json
import re
import xml.etree.ElementTree as ET

import attrs
import numpy as np
import pytest
from dispatch_fakes import AddK, AddOne, N, Twice, make_model

from iron.alloc.render import PALETTE
from iron.core import bf16
from iron.core.testing.pictures import rasterize
from iron.dispatch import graph
from iron.dispatch.pictures import KINDS, chrome_trace, write_chrome_trace
from iron.dispatch.sim_xrt import TRACE_RECORD, read_trace

SVG = "{http://www.w3.org/2000/svg}"
SIZE = 1024


def boxes(svg: str) -> dict[str, tuple[float, float, str]]:
    """Buffer name -> (x, right edge, fill) of each rectangle with a tooltip."""
    found = {}
    for rect in ET.fromstring(svg).iter(f"{SVG}rect"):
        tip = rect.find(f"{SVG}title")
        if tip is not None:
            x, w = float(rect.get("x")), float(rect.get("width"))
            name = re.match(rf"(.*) \(({'|'.join(map(re.escape, KINDS))})\): steps", tip.text)[1]
            found[name] = (x, x + w, rect.get("fill"))
    return found


def hex_colour(pixel) -> str:
    return "#" + "".join(f"{int(c):02x}" for c in pixel[:3])


def test_the_plan_picture_shows_every_version_with_weights_states_and_transients(tmp_path):
    model = make_model(np.ones(N, bf16))
    with pytest.raises(ValueError, match=r"model.plan_svg: nothing compiled yet"):
        model.plan_svg()
    model.compile(x=((4, N), bf16))
    model.compile(x=((1, N), bf16))
    svg = model.plan_svg(tmp_path / "plan.svg")
    assert (tmp_path / "plan.svg").read_text() == svg
    found = boxes(svg)
    fill = dict(zip(KINDS, PALETTE))
    assert found["w"][2] == fill["weights"] and found["cache"][2] == fill["states"]
    prefill = [n for n in found if n.startswith("x (4, 256): ")]
    decode = [n for n in found if n.startswith("x (1, 256): ")]
    steps = [len(v.runlist.steps) for v in model.versions.values()]
    assert len(prefill) >= 4 and decode  # the four products live at once, then the sums
    assert all(found[n][2] == fill["transients"] for n in prefill + decode)
    # residents span both versions; each version's transients stay within its own steps
    left = found["w"][0]
    step_px = (found["w"][1] - left) / sum(steps)
    split = left + steps[0] * step_px
    assert all(found[n][1] <= split + 0.01 for n in prefill)
    assert all(found[n][0] >= split - 0.01 for n in decode)
    pixels = rasterize(svg, width=480)
    colours = {hex_colour(p) for p in pixels.reshape(-1, 4)}
    assert set(PALETTE[:3]) <= colours  # all three kinds drawn, not a blank page
    background = np.all(pixels[..., :3] >= 240, axis=-1).mean()
    assert background < 0.9


@attrs.frozen
class AddOneToEveryElementOfIt(AddOne):
    """AddOne under a name longer than a trace record's 20 bytes."""


def traced(mode="auto", trace_size=8 * TRACE_RECORD.size):
    @graph(backend="sim", mode=mode, device="npu2", trace_size=trace_size)
    def chain(g, x, *, pos):
        h = g(AddOneToEveryElementOfIt(SIZE), x)
        h = g(AddK(SIZE), h, k=pos * 3 + 1)
        return g(Twice(SIZE), h)

    return chain


def test_a_traced_call_becomes_chrome_trace_events_with_full_names(tmp_path):
    chain = traced()
    chain(np.arange(SIZE, dtype=np.int32), pos=2)
    (version,) = chain.versions.values()
    records = read_trace(version.trace)
    assert records[0]["name"] == "AddOneToEveryElement"  # cut to 20 bytes on the device
    path = write_chrome_trace(version, tmp_path / "trace.json")
    data = json.loads(path.read_text())
    assert data == chrome_trace(version)
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    blocks = [s.device or f"host:{s.operator}" for s in version.image.programs[0].steps]
    assert [e["name"] for e in spans] == blocks
    assert blocks[0].startswith("AddOneToEveryElementOfIt_") and blocks[2] == "host:Twice"
    assert [e["tid"] for e in spans] == [0, 1, 2]  # a track per step
    assert [(e["ts"], e["ts"] + e["dur"]) for e in spans] == [
        (r["start"], r["end"]) for r in records
    ]
    assert [e["args"]["bytes moved"] for e in spans] == [r["bytes"] for r in records]
    assert spans[1]["args"]["operator"] == "AddK" and spans[1]["args"]["parameters"]["size"] == SIZE
    assert spans[0]["args"]["reads"] == ["x"] and spans[2]["args"]["writes"] == [
        version.runlist.outputs[0]
    ]
    tracks = {
        e["tid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"
    }
    assert tracks == {0: "step 0: AddOneToEveryElementOfIt", 1: "step 1: AddK", 2: "step 2: Twice"}


def test_only_a_fused_traced_version_has_a_chrome_trace():
    for chain in (traced("separate"), traced(trace_size=0)):
        chain(np.arange(SIZE, dtype=np.int32), pos=0)
        (version,) = chain.versions.values()
        with pytest.raises(ValueError, match="chrome_trace reads a fused, traced version"):
            chrome_trace(version)
