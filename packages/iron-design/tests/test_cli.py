import pytest

from iron.core.cli import main
from iron.core.testing import require_distribution


def test_example_prints_tiles_fifos_usage_and_verdict(capsys):
    assert main(["design", "example", "split_join", "workers=2", "n=2048", "--device", "npu1"]) == 0
    out = capsys.readouterr().out
    assert "design split_join for npu1 (4 columns, aie2)" in out
    assert "(0, 2)  worker  adder0" in out and "(0, 1)  split   scatter" in out
    # a memtile: memory and channels against its own limits, not a core's
    assert "(0, 1)  memtile  8192/524288 B" in out and "3/6" in out
    assert "(0, 2)  core     5120/65536 B" in out
    assert out.rstrip().endswith("split_join: fits the device")


def test_a_design_over_the_limits_exits_1_and_names_them(capsys):
    args = ["design", "example", "add_one", "n=65536", "tile=16384", "--device", "npu1"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "add_one: 3 violation(s)" in out
    assert "tile (0, 2): core memory 263168 B > 65536 B" in out


def test_mlir_flag_prints_the_module(capsys):
    assert main(["design", "example", "passthrough", "--device", "npu1", "--mlir"]) == 0
    out = capsys.readouterr().out
    assert "aie.device(npu1)" in out and "aie.objectfifo.link" in out


def test_the_configuration_digest_is_shown_in_text_json_and_the_lowered_tables(capsys):
    import json

    from iron.core import Device
    from iron.design import examples, lower

    args = ["design", "example", "add_one", "n=4096", "tile=512", "--device", "npu1"]
    expected = lower(examples.add_one(Device.from_name("npu1"), n=4096, tile=512))
    digest = expected.configuration.digest()
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["configuration"] == digest
    assert main(args) == 0
    assert f"configuration {digest[:12]}" in capsys.readouterr().out
    assert main([*args, "--lowered"]) == 0
    assert capsys.readouterr().out.startswith(f"configuration {digest[:12]}\n")


def test_bad_parameters_exit_2_with_a_message(capsys):
    assert main(["design", "example", "add_one", "tile"]) == 2
    assert "parameters are key=value, got 'tile'" in capsys.readouterr().err
    assert main(["design", "show", "NoSuchOperator"]) == 2
    assert "unknown operator 'NoSuchOperator'" in capsys.readouterr().err


def test_show_an_operator_design(capsys):
    require_distribution("iron-design-example-plugin")
    assert main(["design", "show", "AddOne", "size=8192", "tile=2048", "--device", "npu1"]) == 0
    out = capsys.readouterr().out
    assert "(0, 2)  worker  adder  add_one_i32" in out
    assert "in    (2048,) i32  2      8192" in out


def test_check_lists_every_case_with_its_verdict(capsys):
    require_distribution("iron-design-example-plugin")
    assert main(["design", "check", "--device", "npu1", "--family", "design_example"]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split() == ["operator", "case", "npu1:aie2:4x4", "first", "violation"]
    assert lines[1].split()[:3] == ["AddOne", "size=4096", "ok"]
    assert "oversized-lines  3 violation(s)  add_one: tile (0, 2): core memory" in lines[2]
    assert "1 design(s) break npu1's limits" in captured.err


@pytest.mark.parametrize("family", ["no-such-family"])
def test_check_with_nothing_to_check_says_so(capsys, family):
    assert main(["design", "check", "--family", family]) == 0
    assert (
        "no registered operator has a design in family 'no-such-family'" in capsys.readouterr().out
    )


def test_doctor_says_whether_designs_can_be_built(capsys, monkeypatch, tmp_path):
    from iron.design import aiecc

    monkeypatch.setattr(
        aiecc, "find_toolchain", lambda: aiecc.Toolchain(tmp_path / "aiecc", tmp_path)
    )
    main(["doctor"])
    assert (
        f"design toolchain: aiecc {tmp_path / 'aiecc'}, Peano {tmp_path}" in capsys.readouterr().out
    )

    def missing():
        raise aiecc.ToolchainError("cannot compile designs here; missing aiecc")

    monkeypatch.setattr(aiecc, "find_toolchain", missing)
    main(["doctor"])
    out = capsys.readouterr().out
    assert "design toolchain: not found; designs are not built here (cannot compile" in out
    assert "PROBLEM design toolchain" not in out
