"""Bad input to iron-core's public entry points: each case names the thing,
the parameter and the rule, and the CLI exits 2 instead of a traceback."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import numpy as np
import pytest
from core_fakes import CopyAt, RowNorm, Square

from iron.core import (
    Case,
    Device,
    Operator,
    OperatorError,
    bf16,
    files,
    hookimpl,
    registry,
    same_shape_unary,
)
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
        ("[1, 2]", "must hold a JSON object, not an array"),
        ("not json", "not valid JSON"),
        ('{"format": 1, "operators": [1]}', "'operators' must map operator -> case -> device"),
        ('{"format": 1, "operators": {"A": {"c": 3}}}', "'operators' must map operator -> case"),
        ('{"format": 1, "devices": "npu1"}', "'devices' must be a list of device names"),
        ('{"format": 1, "family": 3}', "family=3: must be a string or null, not an integer"),
        ('{"format": "1"}', "format='1': must be an integer, not a string"),
        ('{"format": 1.0}', "format=1.0: must be an integer, not a number"),
        ('{"format": true}', "format=True: must be an integer, not true or false"),
        ('{"format": 2}', "format 2: this IRON reads format 1"),
        ('{"format": 1, "format": 1}', "key 'format' appears twice in one object"),
        ('{"format": 1, "operators": {"A": {}, "A": {}}}', "key 'A' appears twice"),
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
    evil = {"\x1b]0;owned\x07Evil": {}}
    path.write_text(json.dumps({"format": 1, "operators": evil, "devices": ["npu1"]}))
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


# ---- special files (issue 28 item 2) ----


@contextlib.contextmanager
def deadline(seconds: int = 20):
    """Fail (instead of hanging the suite) when the block blocks."""

    def expired(*_):
        raise TimeoutError(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this platform has no FIFOs")


@needs_fifo
def test_spec_snapshot_never_replaces_or_writes_through_a_fifo(tmp_path, capsys):
    path = tmp_path / "snapshot.json"
    os.mkfifo(path)
    with deadline():
        assert main(["spec", "snapshot", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"iron: {path}: is a FIFO, not a regular file; refused: a write would go " \
        "through it or replace it\n"  # fmt: skip
    assert path.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["snapshot.json"]


def test_spec_snapshot_never_replaces_a_device_behind_a_link(tmp_path, capsys):
    path = tmp_path / "snapshot.json"
    path.symlink_to("/dev/null")
    assert main(["spec", "snapshot", str(path)]) == 2
    assert f"{path}: is a character device, not a regular file" in capsys.readouterr().err
    assert path.is_symlink() and Path("/dev/null").is_char_device()


def test_spec_snapshot_into_a_folder_is_refused(tmp_path, capsys):
    assert main(["spec", "snapshot", str(tmp_path)]) == 2
    assert f"{tmp_path}: is a directory, not a regular file" in capsys.readouterr().err


def test_spec_snapshot_through_a_link_replaces_the_file_it_names(tmp_path, capsys):
    require_distribution("iron-example-plugin")
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert main(["spec", "snapshot", str(link), "--family", "example"]) == 0
    assert link.is_symlink() and json.loads(real.read_text())["family"] == "example"
    assert real.stat().st_mode & 0o777 == 0o640  # the old file's permissions kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


@needs_fifo
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_spec_diff_on_a_fifo_or_a_device_exits_2_at_once(tmp_path, capsys, kind):
    path = tmp_path / "snapshot.json"
    os.mkfifo(path) if kind == "fifo" else path.symlink_to(kind)
    with deadline():
        assert main(["spec", "diff", str(path)]) == 2
    err = capsys.readouterr().err
    what = "a FIFO" if kind == "fifo" else "a character device"
    assert err.startswith(f"iron: {path}: is {what}, not a regular file; refused before reading")
    assert err.count("\n") == 1


@needs_fifo
def test_a_file_swapped_for_a_fifo_after_the_check_is_refused_on_the_open_descriptor(
    tmp_path, monkeypatch
):
    path = tmp_path / "snapshot.json"
    os.mkfifo(path)
    regular = os.stat(tmp_path / "..")
    calls = []

    def stat(p, *args, **kwargs):  # says "regular file" the first time only
        calls.append(p)
        return os.stat_result((0o100644, *regular[1:])) if len(calls) == 1 else real_stat(p)

    real_stat = os.stat
    monkeypatch.setattr(files.os, "stat", stat)
    with deadline(), pytest.raises(files.NotRegularFile, match="is a FIFO, not a regular file"):
        files.read_json(path)


def test_files_refuse_a_link_where_links_are_not_followed(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert files.read_json(tmp_path / "link.json") == {}
    with pytest.raises(files.NotRegularFile, match="is a symlink, not a regular file"):
        files.read_json(tmp_path / "link.json", follow_links=False)


def test_a_file_past_its_limit_is_refused_unread(tmp_path):
    (tmp_path / "big.json").write_text("{}" + " " * 100)
    with pytest.raises(files.NotRegularFile, match="is over 10 bytes"):
        files.read_json(tmp_path / "big.json", limit=10)


def test_an_interrupted_write_leaves_the_old_file_and_nothing_else(tmp_path):
    path = tmp_path / "kept.txt"
    path.write_text("old")
    with pytest.raises(KeyboardInterrupt), files.replacing(path) as f:
        f.write("half")
        raise KeyboardInterrupt
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["kept.txt"]


@needs_fifo
def test_a_fifo_planted_during_a_write_is_left_in_place(tmp_path):
    path = tmp_path / "out.txt"
    with pytest.raises(files.NotRegularFile, match="is a FIFO"), files.replacing(path) as f:
        f.write("new")
        os.mkfifo(path)
    assert path.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_require_directory_names_what_is_there(tmp_path):
    (tmp_path / "file").write_text("")
    assert files.require_directory(tmp_path, "--data") == tmp_path
    with pytest.raises(files.NotRegularFile, match=r"--data .*file: is a regular file, not a f"):
        files.require_directory(tmp_path / "file", "--data")
    with pytest.raises(files.NotRegularFile, match=r"--data .*absent: no such folder"):
        files.require_directory(tmp_path / "absent", "--data")


@pytest.mark.parametrize(
    "value, kinds, rule",
    [("3", ["an integer"], "x='3': must be an integer, not a string"),
     (3.0, ["an integer"], "x=3.0: must be an integer, not a number"),
     (True, ["a number"], "x=True: must be a number, not true or false"),
     (1, ["true or false"], "x=1: must be true or false, not an integer"),
     (float("nan"), ["a number"], "x=nan: must be a number, not a number"),
     ([1], ["a string", "null"], r"x=\[1\]: must be a string or null, not an array")],
)  # fmt: skip
def test_expect_names_the_file_the_field_and_both_types(value, kinds, rule):
    with pytest.raises(ValueError, match=f"f.json: {rule}"):
        files.expect("f.json", "x", value, *kinds)
    assert files.expect("f.json", "x", 3, "an integer") == 3


# ---- interrupts (item 4) ----


def test_ctrl_c_exits_130_with_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from iron.core import snapshot

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(snapshot, "snapshot", interrupted)
    assert main(["spec", "snapshot", str(tmp_path / "s.json")]) == 130
    assert capsys.readouterr().err == "iron: interrupted\n"
    assert list(tmp_path.iterdir()) == []


SLOW_LISTING = """
import sys, time
from iron.core import registry
from iron.core.cli import main

def slow(family=None):
    print("listing", flush=True)
    time.sleep(60)

registry.operators = slow
sys.exit(main(["ops", "list"]))
"""


@pytest.mark.parametrize("sent, status, err", [(signal.SIGINT, 130, "iron: interrupted\n"),
                                               (signal.SIGTERM, -signal.SIGTERM, "")])  # fmt: skip
def test_signals_end_a_running_command_quietly(sent, status, err):
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_LISTING],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "IRON_DISABLE_PLUGINS": "*"},  # a broken fixture plugin would warn
    )  # fmt: skip
    try:
        assert process.stdout.readline() == "listing\n"
        process.send_signal(sent)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert (process.returncode, stderr) == (status, err)  # SIGTERM: 143 in a shell


# ---- IRON_* values (item 5) ----


@pytest.mark.parametrize(
    "variable, value, rule",
    [("IRON_BACKEND", "bogus", "IRON_BACKEND='bogus': not a registered backend"),
     ("IRON_DEVICE", "npu9", "IRON_DEVICE='npu9': not a registered device"),
     ("IRON_POISON", "yes", "IRON_POISON='yes': a flag is 0 or 1"),
     ("IRON_CACHE_HOME", "relative/cache", "IRON_CACHE_HOME='relative/cache': must be an absolute"),
     ("IRON_CACHE_HOME", "/dev/null", "IRON_CACHE_HOME='/dev/null': is a character device, not a"),
     ("IRON_PLUGINS", "no-such-plugin", "IRON_PLUGINS='no-such-plugin': no installed plugin is"),
     ("IRON_DISABLE_PLUGINS", "core,typo", "IRON_DISABLE_PLUGINS='core,typo': no installed plugin "
      "is named typo")],
)  # fmt: skip
@pytest.mark.parametrize("argv", [["devices"], ["ops", "list"], ["spec", "diff", "absent.json"]])
def test_a_bad_iron_variable_is_one_line_and_exit_2_for_every_command(
    capsys, monkeypatch, variable, value, rule, argv
):
    monkeypatch.setenv(variable, value)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"iron: {rule}") and err.count("\n") == 1 and out == ""


def test_doctor_reports_a_bad_value_as_a_problem_and_exits_2(capsys, monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "bogus")
    assert main(["doctor"]) == 2
    out, err = capsys.readouterr()
    (row,) = [line for line in out.splitlines() if "IRON_BACKEND" in line]
    assert "bogus" in row and "PROBLEM IRON_BACKEND='bogus': not a registered backend" in row
    assert "NPU stack:" in out  # the rest is still examined
    assert err.startswith("iron doctor: IRON_BACKEND='bogus'") and err.count("\n") == 1


def test_doctor_stops_after_the_settings_on_a_malformed_flag(capsys, monkeypatch):
    monkeypatch.setenv("IRON_DEBUG", "yes")
    assert main(["doctor", "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    (row,) = [r for r in report["settings"] if r["variable"] == "IRON_DEBUG"]
    assert row == {"variable": "IRON_DEBUG", "value": "yes", "source": "env",
                   "problem": "IRON_DEBUG='yes': a flag is 0 or 1"}  # fmt: skip
    assert "plugins" not in report and report["status"] == 2


# ---- duplicates (item 8) ----


def test_a_parameter_given_twice_is_refused(capsys):
    assert main(["ops", "show", "NoSuchThing", "size=64", "size=128"]) == 2
    assert "iron ops show: parameter size is given twice" in capsys.readouterr().err


def test_two_cases_with_one_label_are_refused_at_definition():
    with pytest.raises(OperatorError, match=r"Twice: cases: two are labelled 'size=64'"):

        @attrs.frozen
        class Twice(Operator):
            size: int
            cases = (Case({"size": 64}), Case({"size": 64}))

            @staticmethod
            def arg_spec(size):
                return same_shape_unary(size)


class Shadow:
    """A plugin whose command takes the name of one of iron's own."""

    @staticmethod
    @hookimpl
    def iron_register_commands(register):
        register("ops", "test_bad_input:Shadow", help="not iron's ops")


def test_a_plugin_command_named_like_one_of_irons_is_skipped_naming_it(capsys):
    registry.register_plugin(Shadow, name="shadow")
    try:
        assert main(["ops", "show", "NoSuchThing"]) == 2
    finally:
        registry.unregister_plugin("shadow")
    err = capsys.readouterr().err
    assert "iron: skipping command ops of plugin shadow: the name is taken" in err
    assert "unknown operator 'NoSuchThing'" in err


# ---- ops show without the parameters it needs (issue 31 item 4) ----


class Fakes:
    @staticmethod
    @hookimpl
    def iron_register_operators(register):
        register("RowNorm", "core_fakes:RowNorm", summary="rows")
        register("Knobs", "test_bad_input:Knobs", summary="typed fields")


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setitem(sys.modules, "test_bad_input", sys.modules[__name__])
    registry.register_plugin(Fakes, name="fakes")
    yield
    registry.unregister_plugin("fakes")


@pytest.mark.parametrize(
    "params, problem",
    [([], "missing size, tile_size"),
     (["size=64"], "missing tile_size"),
     (["size=64", "tile_size=8", "colour=red"], "unknown parameter colour"),
     (["size=sixty", "tile_size=8"], "RowNorm: size='sixty': must be an int (a whole number")],
)  # fmt: skip
def test_ops_show_lists_the_parameters_their_types_and_defaults(fakes, capsys, params, problem):
    assert main(["ops", "show", "RowNorm", *params]) == 2
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith("iron: iron ops show RowNorm: ") and problem in first
    assert first.endswith(". Its parameters (key=value):")
    assert "__init__" not in err
    rows = [re.split(r"\s{2,}", line.strip()) for line in err.splitlines()[2:]]
    assert rows == [["size", "int", "required"], ["tile_size", "int", "required"],
                    ["weighted", "bool", "False"],
                    ["num_columns", "int | None", "None (resolved for the device)"]]  # fmt: skip


def test_the_listing_spells_tuples_and_unions(fakes, capsys):
    assert main(["ops", "show", "Knobs"]) == 2
    err = capsys.readouterr().err
    assert (
        "  shape      tuple[int, ...]  (1,)" in err and "  columns    int | None       None" in err
    )
