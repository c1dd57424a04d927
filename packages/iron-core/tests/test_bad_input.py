"""Bad input to iron-core's public entry points: each case names the thing,
the parameter and the rule, and the CLI exits 2 instead of a traceback."""

import json
import subprocess
import sys

import attrs
import numpy as np
import pytest
from core_fakes import CopyAt, RowNorm, Square

from iron.core import Device, Operator, OperatorError, bf16, same_shape_unary
from iron.core.cli import main
from iron.core.operator import AnnotationError, ParameterType
from iron.core.terminal import printable
from iron.core.testing import require_distribution


@attrs.frozen
class Knobs(Operator):
    size: int
    gain: float = 1.0
    enabled: bool = False
    label: str = "x"
    columns: int | None = None
    shape: tuple[int, ...] = (1,)

    @staticmethod
    def arg_spec(size):
        return same_shape_unary(size)


@pytest.mark.parametrize(
    "params, rule",
    [
        ({"size": 1024.0}, "Knobs: size=1024.0: must be an int"),
        ({"size": "abc"}, "Knobs: size='abc': must be an int"),
        ({"size": True}, "Knobs: size=True: must be an int"),
        ({"size": 8, "gain": "hello"}, "Knobs: gain='hello': must be a number, not str"),
        ({"size": 8, "gain": True}, "Knobs: gain=True: must be a number, not bool"),
        ({"size": 8, "enabled": 1}, "Knobs: enabled=1: must be a bool"),
        ({"size": 8, "label": 3}, "Knobs: label=3: must be a string, not int"),
        ({"size": 8, "columns": 2.5}, "Knobs: columns=2.5: must be an int .* or None"),
        ({"size": 8, "shape": (1, "a")}, r"Knobs: shape=\(1, 'a'\): must be a tuple of an int"),
        ({"size": 8, "shape": [1, 2]}, r"Knobs: shape=\[1, 2\]: must be a tuple"),
    ],
)
def test_parameters_of_the_wrong_type_are_refused_at_construction(params, rule):
    with pytest.raises(OperatorError, match=rule):
        Knobs(**params)


def test_the_types_are_attrs_validators_made_when_the_class_is_defined():
    check = attrs.fields(Knobs).columns.validator
    assert isinstance(check, ParameterType) and check.annotation == (int | None)
    op = Knobs(size=8)
    object.__setattr__(op, "size", "8")  # past the frozen class's guard
    with pytest.raises(OperatorError, match="Knobs: size='8': must be an int"):
        attrs.validate(op)


def test_annotations_are_read_never_evaluated():
    ran = []
    with pytest.raises(AnnotationError, match=r"Sneaky.size: annotation .*cannot be read"):

        @attrs.frozen
        class Sneaky(Operator):
            size: "ran.append(1) or int"

    with pytest.raises(AnnotationError, match=r"Ghost.size: annotation 'Later' cannot be read"):

        @attrs.frozen
        class Ghost(Operator):
            size: "Later"  # noqa: F821 (defined after the class, or never)

    assert ran == []


def test_parameters_of_the_right_type_pass_and_float_fields_take_ints():
    op = Knobs(size=np.int64(8), gain=2, enabled=np.bool_(True), columns=None, shape=(2, 4))
    assert op.gain == 2 and op.size == 8


def test_type_checks_run_before_the_operators_own_rules():
    # RowNorm's validate would compare 'abc' with an int and raise a bare TypeError
    with pytest.raises(OperatorError, match="RowNorm: tile_size='abc': must be an int"):
        RowNorm(size=64, tile_size="abc")


def test_resolve_refuses_a_device_name():
    with pytest.raises(TypeError, match=r"Square.resolve: device must be a Device .*'npu2'"):
        Square(size=64).resolve("npu2")
    assert Square(size=64).resolve(Device.from_name("npu2")).device.name == "npu2"


def test_call_reference_refuses_arrays_unlike_the_specs():
    op = Square(size=64)
    with pytest.raises(TypeError, match=r"Square: x: shape \(64,\) of bf16 .* got \(32,\) of bf16"):
        op.call_reference(np.zeros(32, bf16))
    with pytest.raises(
        TypeError, match=r"Square: x: shape \(64,\) of bf16 .* got \(64,\) of float32"
    ):
        op.call_reference(np.zeros(64, np.float32))
    with pytest.raises(TypeError, match=r"Square: reference takes 1 array\(s\) \(x\), got 2"):
        op.call_reference(np.zeros(64, bf16), np.zeros(64, bf16))
    with pytest.raises(TypeError, match="Square: x: a numpy array, got list"):
        op.call_reference([0.0] * 64)
    (y,) = op.call_reference(np.ones(64, bf16))
    assert y.shape == (64,)


def test_call_reference_still_checks_per_call_names():
    with pytest.raises(TypeError, match="CopyAt has no per-call member nope"):
        CopyAt(size=4, rows=2).call_reference(np.zeros(4, bf16), np.zeros((2, 4), bf16), nope=1)


def test_spec_diff_on_a_missing_file_exits_2_naming_it(tmp_path, capsys):
    missing = tmp_path / "absent.json"
    assert main(["spec", "diff", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "cannot read the snapshot" in err


@pytest.mark.parametrize(
    "content, rule",
    [
        ("[1, 2]", "a snapshot is a JSON object, got list"),
        ("not json", "not a JSON snapshot"),
        ('{"operators": [1]}', "'operators' must map operator -> case -> device"),
        ('{"operators": {"A": {"c": 3}}}', "'operators' must map operator -> case -> device"),
        ('{"operators": {}, "devices": "npu1"}', "'devices' must be a list of device names"),
        ('{"operators": {}, "family": 3}', "'family' must be a family name or null"),
    ],
)
def test_spec_diff_on_a_file_that_is_not_a_snapshot_exits_2(tmp_path, capsys, content, rule):
    path = tmp_path / "snapshot.json"
    path.write_text(content)
    assert main(["spec", "diff", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and rule in err


def test_spec_diff_does_not_echo_control_sequences_from_the_file(tmp_path, capsys):
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps({"operators": {"\x1b]0;owned\x07Evil": {}}, "devices": ["npu1"]}))
    assert main(["spec", "diff", str(path)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b]0;owned\\x07Evil: removed" in out


def test_printable_escapes_controls_but_keeps_lines():
    assert printable("a\x1b[2Jb\tc\nd\x9b") == "a\\x1b[2Jb\tc\nd\\x9b"


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    # `iron ops list | head -1`: stdout closes before everything is written
    reader, writer = subprocess.os.pipe()
    subprocess.os.close(reader)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from iron.core.cli import main; sys.exit(main(['ops', 'list']))",
        ],
        stdout=writer,
        stderr=subprocess.PIPE,
        text=True,
    )
    subprocess.os.close(writer)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr
    assert done.returncode == 141


def test_ops_show_with_a_parameter_of_the_wrong_type_exits_2(capsys):
    require_distribution("iron-example-plugin")
    assert main(["ops", "show", "Scale", "size=abc"]) == 2
    assert "Scale: size='abc': must be an int" in capsys.readouterr().err


def test_spec_snapshot_into_a_missing_folder_exits_2_naming_it(tmp_path, capsys):
    target = tmp_path / "absent" / "snapshot.json"
    assert main(["spec", "snapshot", str(target)]) == 2
    assert str(tmp_path / "absent") in capsys.readouterr().err


def test_a_failed_snapshot_leaves_no_file_behind(tmp_path, monkeypatch):
    from iron.core import snapshot

    def broken(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(snapshot.json, "dumps", broken)
    with pytest.raises(KeyboardInterrupt):
        snapshot.write(tmp_path / "snapshot.json")
    assert list(tmp_path.iterdir()) == []
