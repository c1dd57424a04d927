"""Helpers for an app's own tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def run_command(main: Callable[[Sequence[str]], int], capsys, *argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one command of an app's CLI `main`, run
    in the test's process; argparse's exits count too. `capsys` is pytest's."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err
