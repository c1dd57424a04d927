"""Pictures of designs (`design_svg`), parsed as XML and drawn by a real
renderer, and the commands that write them: `iron design show/example
--svg` and `iron design simulate`."""

import json
import re
import xml.etree.ElementTree as ET

import attrs
import numpy as np
import pytest

from iron.core import Device
from iron.core.cli import main
from iron.core.testing import require_distribution
from iron.core.testing.pictures import rasterize
from iron.design import Acquire, DeadlockError, ObjectFifo, core, examples, shim, simulate
from iron.design import cli as design_cli
from iron.design.pictures import BLOCKED, KIND_COLOUR, OVER, design_svg

SVG = "{http://www.w3.org/2000/svg}"
NPU1 = Device.from_name("npu1")


def hex_colour(pixel) -> str:
    return "#" + "".join(f"{int(c):02x}" for c in pixel[:3])


def colours(svg: str) -> set[str]:
    pixels = rasterize(svg, width=240)
    drawn = ~np.all(pixels[..., :3] >= 240, axis=-1)
    assert drawn.mean() > 0.01  # not a blank page
    return {hex_colour(p) for p in pixels.reshape(-1, 4)}


def arrows(svg: str) -> dict[str, list[str]]:
    """Fifo name -> the stroke of each of its arrows."""
    found: dict[str, list[str]] = {}
    for path in ET.fromstring(svg).iter(f"{SVG}path"):
        tip = path.find(f"{SVG}title")
        if tip is not None:
            found.setdefault(re.match(r"fifo (\S+):", tip.text)[1], []).append(path.get("stroke"))
    return found


def texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def stalled(device=NPU1, **sizes):
    """add_one whose worker also waits on a fifo, `scales`, that nothing fills."""
    design = examples.add_one(device, **sizes)
    adder = design.worker("adder")
    return attrs.evolve(
        design,
        fifos=(*design.fifos, ObjectFifo("scales", 16, "i32", shim(), (core("adder"),))),
        workers=(attrs.evolve(adder, body=(Acquire("in"), Acquire("scales"), *adder.body[1:])),),
    )


@pytest.mark.parametrize("device", ["npu1", "npu2"])
@pytest.mark.parametrize("name", sorted(examples.EXAMPLES))
def test_every_example_is_drawn_with_its_tiles_and_an_arrow_per_fifo_end(name, device):
    design = examples.EXAMPLES[name](Device.from_name(device))
    svg = design_svg(design)
    found = arrows(svg)
    assert {f.name: len(f.consumers) for f in design.fifos} == {k: len(v) for k, v in found.items()}
    words = texts(svg)
    for fifo in design.fifos:  # each arrow says the depth and the object's bytes
        assert any(w.startswith(f"{fifo.name} ") and "B" in w for w in words), fifo.name
    for worker in examples.EXAMPLES[name](Device.from_name(device)).workers:
        assert any(w.startswith(f"{worker.name}: ") for w in words)
    assert "fits the device" in words
    bands = {r.get("fill") for r in ET.fromstring(svg).iter(f"{SVG}rect")}
    kinds = {"shim", "memtile" if design.links else "shim", "core" if design.workers else "shim"}
    assert bands & set(KIND_COLOUR.values()) == {KIND_COLOUR[k] for k in kinds}


def test_a_renderer_draws_the_array_in_its_tile_colours():
    drawn = colours(design_svg(examples.split_join(NPU1, workers=2)))
    assert set(KIND_COLOUR.values()) <= drawn
    assert OVER not in drawn


def test_a_design_over_the_limits_is_red_where_it_breaks_them(tmp_path):
    design = examples.add_one(NPU1, n=65536, tile=16384)
    svg = design_svg(design, tmp_path / "over.svg")
    assert (tmp_path / "over.svg").read_text() == svg
    root = ET.fromstring(svg)
    frames = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    red = [r.find(f"{SVG}title").text.splitlines()[0] for r in frames if r.get("stroke") == OVER]
    assert red == ["core (0, 2)"]  # the core whose memory and BDs overflow
    words = texts(svg)
    assert "3 violation(s)" in words
    assert any(w.startswith("add_one: tile (0, 2): core memory 263168 B > 65536 B") for w in words)
    assert "257 KiB/64 KiB" in words  # the memory bar's figure, red
    assert OVER in colours(svg)


def test_a_deadlock_marks_the_fifos_it_waits_on_and_lists_the_blocked():
    design = stalled()
    with pytest.raises(DeadlockError) as error:
        simulate(design, {"x": np.arange(4096, dtype=np.int32)})
    svg = design_svg(design, blocked=error.value.blocked)
    found = arrows(svg)
    assert found["scales"] == [BLOCKED] and found["in"] == [BLOCKED]  # waited on; full, untaken
    assert found["out"] != [BLOCKED]
    words = texts(svg)
    assert "scales 2 x 64 B blocked" in words
    assert any(
        w.startswith("worker adder at (0, 2), iteration 1: waits on the consumer lock")
        for w in words
    )
    assert BLOCKED in colours(svg)
    assert arrows(design_svg(design))["scales"] != [BLOCKED]  # not marked without a deadlock


def test_design_svg_refuses_what_is_not_a_design():
    with pytest.raises(TypeError, match=r"^design_svg: design must be an iron\.design\.Design"):
        design_svg("add_one")


# ---- the commands ------------------------------------------------------------------------


def test_show_and_example_write_the_picture_beside_their_output(tmp_path, capsys):
    path = tmp_path / "split_join.svg"
    args = ["design", "example", "split_join", "workers=2", "--device", "npu1", "--svg", str(path)]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "split_join: fits the device" in captured.out
    assert f"wrote the picture to {path}" in captured.err
    assert set(arrows(path.read_text())) == {"in", "in0", "in1", "out", "out0", "out1"}
    over = tmp_path / "over.svg"
    args = ["design", "example", "add_one", "n=65536", "tile=16384", "--device", "npu1"]
    assert main([*args, "--json", "--svg", str(over)]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False  # stdout stays JSON
    assert OVER in colours(over.read_text())


def test_simulate_judges_the_design_against_the_reference_and_counts_traffic(capsys):
    require_distribution("iron-design-example-plugin")
    args = ["design", "simulate", "AddOne", "size=8192", "tile=2048", "--device", "npu1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "design add_one on npu1:aie2:4x4, simulated on random inputs (seed 0)" in out
    assert "PASS y: ok (0/8192 outside" in out
    lines = [line.split() for line in out.splitlines()]
    assert ["x", "32,768", "0"] in lines and ["y", "0", "32,768"] in lines
    assert ["DDR", "32,768", "32,768"] in lines
    assert main([*args, "--json", "--seed", "3"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["passed"] and outcome["seed"] == 3 and outcome["design"] == "add_one"
    assert outcome["outputs"][0]["mismatches"] == 0
    assert outcome["traffic"]["tensors"]["x"] == {"read": 32768, "written": 0}


def test_simulate_fails_a_design_that_computes_wrongly(capsys, monkeypatch):
    require_distribution("iron-design-example-plugin")
    real = design_cli.design_of

    def half_written(op):  # the kernel told half the count: the rest is garbage
        design = real(op)
        adder = design.worker("adder")
        call = adder.body[2]
        half = attrs.evolve(call, args=(*call.args[:2], call.args[2] // 2))
        body = (*adder.body[:2], half, *adder.body[3:])
        return attrs.evolve(design, workers=(attrs.evolve(adder, body=body),))

    monkeypatch.setattr(design_cli, "design_of", half_written)
    args = ["design", "simulate", "AddOne", "size=4096", "--device", "npu1"]
    assert main(args) == 1
    assert "FAIL y: 2048/4096 elements outside exact" in capsys.readouterr().out


def test_simulate_names_the_blocked_actors_of_a_deadlock(capsys, monkeypatch, tmp_path):
    require_distribution("iron-design-example-plugin")
    monkeypatch.setattr(design_cli, "design_of", lambda op: stalled(op.device, n=op.size))
    path = tmp_path / "stalled.svg"
    args = ["design", "simulate", "AddOne", "size=4096", "--device", "npu1", "--svg", str(path)]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert out.startswith("DeadlockError: design add_one cannot finish:")
    assert "worker adder at (0, 2), iteration 1: waits on the consumer lock of fifo scales" in out
    assert arrows(path.read_text())["scales"] == [BLOCKED]
    assert main([*args, "--json"]) == 1
    outcome = json.loads(capsys.readouterr().out)
    assert not outcome["passed"] and outcome["error"] == "DeadlockError"
    waiting = [b for b in outcome["blocked"] if b["fifo"] == "scales"]
    assert waiting and waiting[0]["lock"] == "consumer" and waiting[0]["needs"] == 1


def test_simulate_refuses_bad_input_with_one_line(capsys):
    assert main(["design", "simulate", "NoSuchOperator"]) == 2
    assert "unknown operator 'NoSuchOperator'" in capsys.readouterr().err
    assert main(["design", "simulate", "AddOne", "size"]) == 2
    assert "parameters are key=value, got 'size'" in capsys.readouterr().err


def test_simulate_takes_design_parameters_from_the_operator_or_names_the_one_it_lacks(
    capsys, monkeypatch
):
    require_distribution("iron-design-example-plugin")
    real = design_cli.design_of
    monkeypatch.setattr(
        design_cli, "design_of", lambda op: attrs.evolve(real(op), params=("tile",))
    )
    args = ["design", "simulate", "AddOne", "size=4096", "--device", "npu1", "--json"]
    assert main(args) == 0  # an integer field of the operator
    assert json.loads(capsys.readouterr().out)["passed"]
    monkeypatch.setattr(design_cli, "design_of", lambda op: attrs.evolve(real(op), params=("k",)))
    assert main(args) == 2
    assert (
        "design add_one: parameter k is neither a per-call member nor an integer field of AddOne"
        in capsys.readouterr().err
    )
