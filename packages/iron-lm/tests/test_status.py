"""The status line a long wait shows (the host kernels' compile or load)."""

from iron.lm.model import status_line


def test_a_status_line_shows_its_label_and_latest_text(capsys):
    with status_line(True, "host kernels") as status:
        status("JIT compiling kernels (1 of 7: a)")
        status("JIT compiling kernels (2 of 7: b)")
    err = capsys.readouterr().err
    assert "host kernels: JIT compiling kernels (2 of 7: b)" in err


def test_a_status_line_never_called_prints_nothing(capsys):
    with status_line(True, "host kernels"):
        pass
    with status_line(False, "host kernels") as status:
        status("hidden with -q")
    assert capsys.readouterr().err == ""
