"""Helpers for tests of emitted MLIR (needs the `filecheck` package, a test
extra: imported on first use)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path


def filecheck(text: str, checks: str, workdir: Path) -> tuple[int, str]:
    """FileCheck `checks` against `text`: (exit code, output). Runs the
    filecheck command's entry point in process (a subprocess per check would
    dominate a test run); the two files are written into `workdir`."""
    from filecheck.main import main

    check_file, input_file = Path(workdir) / "checks.txt", Path(workdir) / "input.mlir"
    check_file.write_text(checks)
    input_file.write_text(text)
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        try:
            main(["filecheck", str(check_file), "--input-file", str(input_file)])
        except SystemExit as done:
            return done.code or 0, output.getvalue()
    return 0, output.getvalue()
