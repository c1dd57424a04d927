import argparse
import json
import os
import subprocess
import sys
from importlib.metadata import version

import pytest

from iron.core.cli import build_parser, main, parse_value
from iron.core.settings import VARIABLES
from iron.core.testing import require_distribution, undescribed_arguments


def test_parse_value():
    assert parse_value("true") is True and parse_value("False") is False
    assert parse_value("none") is None
    assert parse_value("12") == 12 and parse_value("0.5") == 0.5
    assert parse_value("[256, 4]") == [256, 4]
    assert parse_value("two_halves") == "two_halves"


def test_devices_json(capsys):
    assert main(["devices", "--json"]) == 0
    devices = json.loads(capsys.readouterr().out)
    assert devices["npu2"]["columns"] == 8 and devices["npu2"]["shim_dma_limit"] == 16
    assert devices["npu1"]["arch"] == "aie2"


def test_doctor_reports_an_absent_npu_stack_and_how_to_get_it(capsys, npu_stack):
    npu_stack(present=False)
    status = main(["doctor"])
    out = capsys.readouterr().out
    assert "iron-npu-core 0.1.0" in out
    assert "[ ] mlir-aie: not installed (install the mlir_aie and llvm-aie wheels" in out
    assert "[ ] pyxrt: not importable (install XRT with the NPU (amdxdna) plugin" in out
    assert "[ ] NPU device: no /dev/accel/accel* node (needs a Ryzen AI NPU" in out
    assert status in (0, 1)  # 1 where a fixture distribution is broken on purpose


def test_doctor_reports_a_present_npu_stack(capsys, npu_stack):
    npu_stack(present=True)
    main(["doctor"])
    out = capsys.readouterr().out
    assert "[x] mlir-aie: 1.0 (simulated)" in out and "[x] pyxrt: importable" in out
    assert "[x] NPU device: /dev/accel/accel0 (simulated)" in out and "[ ]" not in out


def test_doctor_prints_every_setting_and_its_source(capsys, monkeypatch):
    monkeypatch.setenv("IRON_DEVICE", "npu1")
    monkeypatch.delenv("IRON_DEBUG", raising=False)
    main(["doctor"])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if "  IRON_" in line}
    assert set(rows) == {v.name for v in VARIABLES}
    assert rows["IRON_DEVICE"] == ["npu1", "env"] and rows["IRON_DEBUG"] == ["0", "default"]
    assert out.index("settings:") < out.index("packages:")


def test_a_malformed_setting_exits_2_naming_it(capsys, monkeypatch):
    monkeypatch.setenv("IRON_DEBUG", "yes")
    assert main(["devices"]) == 2
    assert capsys.readouterr().err == "iron: IRON_DEBUG='yes': a flag is 0 or 1\n"


def test_iron_debug_shows_the_traceback(monkeypatch):
    monkeypatch.setenv("IRON_DEBUG", "1")
    with pytest.raises(KeyError, match="unknown operator 'NoSuchThing'"):
        main(["ops", "show", "NoSuchThing"])


def test_unknown_operator_exits_2_with_a_message(capsys):
    assert main(["ops", "show", "NoSuchThing"]) == 2
    assert "unknown operator 'NoSuchThing'" in capsys.readouterr().err


def test_ops_show_prints_resolved_specs(capsys):
    require_distribution("iron-example-plugin")
    assert main(["ops", "show", "Scale", "size=64", "factor=0.5", "--device", "npu1"]) == 0
    out = capsys.readouterr().out
    assert "Scale  (iron_example_plugin.scale:Scale, family example)" in out
    assert "device npu1: 4 columns" in out and "factor = 0.5" in out
    assert "in   x    (64,)  bf16" in out and "out  y    (64,)  bf16" in out
    assert "tolerance: rtol 0.01" in out


def test_ops_show_reports_refusals(capsys):
    require_distribution("iron-example-plugin")
    assert main(["ops", "show", "Scale", "size=63"]) == 2
    assert "Scale: size=63: a positive even number of elements" in capsys.readouterr().err


def test_ops_list_by_family_json(capsys):
    require_distribution("iron-example-plugin")
    assert main(["ops", "list", "--family", "example", "--json"]) == 0
    assert [e["name"] for e in json.loads(capsys.readouterr().out)] == ["Offset", "Scale"]


def test_spec_snapshot_then_diff_names_each_changed_case(tmp_path, capsys):
    require_distribution("iron-example-plugin")
    path = tmp_path / "snapshot.json"
    assert main(["spec", "snapshot", str(path), "--family", "example"]) == 0
    data = json.loads(path.read_text())
    assert data["family"] == "example" and data["devices"] == ["npu1", "npu2"]
    assert data["operators"]["Scale"]["size=1024"]["npu2"]["args"] == [
        ["x", [1024], "bf16", "in"],
        ["y", [1024], "bf16", "out"],
    ]
    assert main(["spec", "diff", str(path)]) == 0
    capsys.readouterr()

    data["operators"]["Scale"]["size=1024"]["npu1"]["args"][0][1] = [512]
    del data["operators"]["Offset"]
    path.write_text(json.dumps(data))
    assert main(["spec", "diff", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "Offset: added",
        'Scale[size=1024] on npu1: args [["x", [512], "bf16", "in"], ["y", [1024], "bf16", "out"]] -> '
        '[["x", [1024], "bf16", "in"], ["y", [1024], "bf16", "out"]]',
    ]


@pytest.mark.parametrize("argv", [["ops"], ["spec"], []])
def test_incomplete_commands_show_usage(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "usage: iron" in capsys.readouterr().err


def test_ops_show_refuses_a_parameter_without_a_value(capsys):
    assert main(["ops", "show", "NoSuchThing", "size"]) == 2
    assert "iron ops show: parameters are key=value, got 'size'" in capsys.readouterr().err


# ---- CLIs people know (issue 31 item 4) ----


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"iron (iron-npu-core {version('iron-npu-core')})\n"


def test_every_option_and_argument_is_described():
    """iron-core's own commands here; each plugin's tests check its own."""
    own = {"iron", "iron ops", "iron devices", "iron plugins", "iron doctor", "iron spec"}
    found = undescribed_arguments(build_parser())
    assert [a for a in found if " ".join(a.split(":")[0].split()[:2]) in own] == []
    bare = argparse.ArgumentParser(prog="bare")
    bare.add_subparsers().add_parser("sub").add_argument("thing")
    assert undescribed_arguments(bare) == ["bare sub: thing"]  # and would see a gap


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["ops", "show", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: npu2)" in out and "(default: None)" not in out
    assert "(default: False)" not in out


def test_doctor_json(capsys, npu_stack, monkeypatch):
    npu_stack(present=False)
    monkeypatch.setenv("IRON_DEVICE", "npu1")
    status = main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == status and status in (0, 1)
    (row,) = [r for r in report["settings"] if r["variable"] == "IRON_DEVICE"]
    assert row == {"variable": "IRON_DEVICE", "value": "npu1", "source": "env", "problem": None}
    assert report["packages"]["iron-npu-core"] == version("iron-npu-core")
    assert {p["name"] for p in report["plugins"]} >= {"core"}
    (mlir,) = [p for p in report["npu_stack"] if p["name"] == "mlir-aie"]
    assert mlir["present"] is False and "not on PyPI" in mlir["how_to_get"]


def test_shell_completion_through_argcomplete(tmp_path):
    pytest.importorskip("argcomplete", reason="the completion extra is not installed")
    answer = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": "iron sp",
           "COMP_POINT": "7", "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}  # fmt: skip
    code = "import sys; from iron.core.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert answer.read_text().split() == ["spec"]
