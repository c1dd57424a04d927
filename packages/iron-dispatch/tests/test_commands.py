"""The `iron` subcommands installed beside iron-dispatch (its own `cache`,
and iron-design's `design`, which it depends on): every option described,
and the JSON they print parses into what the tables show."""

import json

from iron.core.cli import build_parser, main
from iron.core.testing import undescribed_arguments


def test_every_option_of_cache_and_design_is_described():
    found = undescribed_arguments(build_parser())
    assert [a for a in found if a.startswith(("iron cache", "iron design"))] == []


def test_design_check_json_gives_a_verdict_per_case(capsys):
    status = main(["design", "check", "--device", "npu1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["device"] == "npu1:aie2:4x4" and status == (1 if report["failed"] else 0)
    checked = [c for c in report["cases"] if "ok" in c]
    assert checked and all(c["ok"] == (c["violations"] == []) for c in checked)
    assert report["failed"] == sum(not c["ok"] for c in checked)
    assert all(c["refused"] for c in report["cases"] if "ok" not in c)
    assert main(["design", "check", "--device", "npu1"]) == status  # the table agrees
    table = capsys.readouterr().out
    assert all(c["operator"] in table for c in report["cases"])


def test_design_show_json_matches_the_placed_design(capsys):
    params = ["RMSNorm", "size=2048", "tile_size=1024", "--device", "npu2"]
    assert main(["design", "show", *params, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ok"] is True and shown["violations"] == []
    assert shown["device"] == "npu2:aie2p:8x4"
    assert [t["name"] for t in shown["tensors"]] == ["x", "y"]
    assert all(t["memory_bytes"] <= t["memory_limit"] for t in shown["tiles"] if t["memory_limit"])
    assert main(["design", "show", *params]) == 0
    table = capsys.readouterr().out
    assert f"digest {shown['digest'][:12]}" in table
    assert all(f["name"] in table for f in shown["fifos"])


def test_design_show_without_parameters_lists_them(capsys):
    assert main(["design", "show", "RMSNorm"]) == 2
    err = capsys.readouterr().err
    assert "iron design show RMSNorm: missing size, tile_size. Its parameters" in err
    assert "tile_size" in err and "int" in err
