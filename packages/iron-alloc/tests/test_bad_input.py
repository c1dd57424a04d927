"""Bad input to the planner's benchmark CLI: exit 2 naming the file, the
line and the rule, never a traceback; a closed stdout ends it quietly."""

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from iron.alloc import LiveRange, place
from iron.alloc.bench import InstanceError, load_instance, main, parser
from iron.alloc.files import NotRegularFile
from iron.alloc.render import render_png


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("value", ["0", "-3", "10000001", "many"])
def test_random_steps_out_of_range_exit_2(capsys, value):
    code, _, err = run(capsys, "--random", value)
    assert code == 2 and "--random" in err
    assert "must be from 1 to 1000000" in err or "is not an integer" in err


def test_alignment_below_1_exits_2(capsys):
    code, _, err = run(capsys, "--alignments", "0", "--random", "10")
    assert code == 2 and "--alignments" in err and "must be from 1" in err


@pytest.mark.parametrize(
    "content, rule",
    [
        ("id,lower,upper,size\na,2,2,10\n", "line 2: buffer a needs 0 <= lower < upper"),
        ("id,lower,upper,size\na,3,1,10\n", "line 2: buffer a needs 0 <= lower < upper"),
        ("id,lower,upper,size\na,0,1,-5\n", "size >= 0, got lower 0, upper 1, size -5"),
        ("id,lower,upper,size\na,0,x,5\n", "line 2: lower, upper and size must be integers"),
        ("id,lower,upper,size\na,0,1,5\na,1,2,5\n", "line 3: buffer a appears twice"),
        ("id,begin,end\na,0,1\n", "the header must name id, lower, upper and size"),
        ("", "the header must name id, lower, upper and size"),
    ],
)
def test_a_bad_csv_exits_2_naming_file_line_and_rule(tmp_path, capsys, content, rule):
    (tmp_path / "bad.csv").write_text(content)
    code, _, err = run(capsys, "--data", tmp_path, "--random", "10")
    assert code == 2 and str(tmp_path / "bad.csv") in err and rule in err
    assert "Traceback" not in err


def test_load_instance_names_a_missing_file(tmp_path):
    with pytest.raises(InstanceError, match=r"absent\.csv: cannot read"):
        load_instance(tmp_path / "absent.csv")


def test_data_that_is_not_a_folder_exits_2(tmp_path, capsys):
    code, _, err = run(capsys, "--data", tmp_path / "nothing", "--random", "10")
    assert code == 2 and "not a folder" in err


def test_a_control_sequence_in_a_name_is_escaped(tmp_path, capsys):
    (tmp_path / "bad.csv").write_text("id,lower,upper,size\n\x1b[2J,3,1,10\n")
    code, _, err = run(capsys, "--data", tmp_path, "--random", "10")
    assert code == 2 and "\x1b" not in err and "\\x1b[2J" in err


def test_a_closed_stdout_ends_the_benchmark_quietly(tmp_path):
    reader, writer = subprocess.os.pipe()
    subprocess.os.close(reader)
    done = subprocess.run(
        [sys.executable, "-m", "iron.alloc.bench", "--random", "20", "--alignments", "1"],
        stdout=writer,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,  # no CSV corpus here: only the small random graph
    )
    subprocess.os.close(writer)
    assert "Traceback" not in done.stderr and done.returncode == 141


def test_a_column_named_twice_in_the_header_is_refused(tmp_path, capsys):
    (tmp_path / "bad.csv").write_text("id,lower,upper,size,size\na,0,1,5,7\n")
    code, _, err = run(capsys, "--data", tmp_path, "--random", "10")
    assert code == 2 and "bad.csv: the header names size twice" in err


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


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this platform has no FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_an_instance_that_is_a_fifo_or_a_device_exits_2_at_once(tmp_path, capsys, kind):
    path = tmp_path / "stuck.csv"
    os.mkfifo(path) if kind == "fifo" else path.symlink_to(kind)
    with deadline():
        code, _, err = run(capsys, "--data", tmp_path, "--random", "10")
    what = "a FIFO" if kind == "fifo" else "a character device"
    assert code == 2 and f"{path}: is {what}, not a regular file" in err
    assert err.count("\n") == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this platform has no FIFOs")
def test_render_png_never_writes_through_or_replaces_a_fifo(tmp_path):
    pytest.importorskip("matplotlib")
    ranges, sizes = {"a": LiveRange(0, 1)}, {"a": 64}
    plan = place(ranges, sizes)
    os.mkfifo(tmp_path / "plan.png")
    with deadline(), pytest.raises(NotRegularFile, match=r"plan\.png: is a FIFO"):
        render_png(plan, ranges, sizes, tmp_path / "plan.png")
    assert (tmp_path / "plan.png").is_fifo() and len(list(tmp_path.iterdir())) == 1
    real = tmp_path / "real.png"
    (tmp_path / "link.png").symlink_to(real)
    render_png(plan, ranges, sizes, tmp_path / "link.png")  # the file a link names
    assert real.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "link.png").is_symlink()


# ---- interrupts and the command line (issue 28 item 4, issue 31 item 4) ----


def test_ctrl_c_exits_130_with_one_line(capsys, monkeypatch):
    import iron.alloc.bench as bench

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "measure", interrupted)
    code, _, err = run(capsys, "--random", "10")
    assert code == 130 and err == "iron-alloc-bench: interrupted\n"


def test_version_defaults_and_every_option_described(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("iron-alloc-bench (iron-npu-alloc ")
    code, out, _ = run(capsys, "--help")
    text = " ".join(out.split())
    assert code == 0 and "(default: [1, 64])" in text and "(default: None)" not in text
    bench_parser = parser()
    undescribed = [a.dest for a in bench_parser._actions if not a.help]
    assert undescribed == []
