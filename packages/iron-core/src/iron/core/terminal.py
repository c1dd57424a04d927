"""What a CLI prints and how it ends: text from files and plugins made safe
for a terminal, and a closed stdout (`iron ... | head -1`) ending quietly."""

from __future__ import annotations

import os
import re
import sys

# C0 and C1 controls and DEL, except newline and tab: an escape sequence in a
# name read from a file could move the cursor, retitle the window or hide text
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

#: the status a shell reports for a program ended by SIGPIPE
BROKEN_PIPE_STATUS = 141
#: the status a shell reports for a program ended by SIGINT (128 + 2): Ctrl-C
INTERRUPTED = 130


def printable(text) -> str:
    """`text` with every control character but newline and tab shown as an
    escape (``\\x1b``), so it prints as itself and does nothing else."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def stdout_closed() -> int:
    """Call from `except BrokenPipeError`: the reader of stdout went away
    (`| head -1`). Point stdout at devnull so the interpreter's final flush
    does not raise again, and return the status to exit with."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a descriptor (captured)
        pass
    return BROKEN_PIPE_STATUS
