"""Reading a model directory's files safely: each is checked to be a
regular file before it is opened (a FIFO would block the reader forever, a
link to /dev/zero would feed it without end), and JSON comes back with the
file named in every error.

The check is made twice: `os.stat` before opening (so a FIFO or a device
is never opened at all), then `fstat` on the opened descriptor (so a file
swapped for one between the two calls is refused too; the open is
non-blocking, so a FIFO slipped in there cannot hang it).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse(path: Path, mode: int, error: type[Exception]) -> Exception:
    return error(
        f"{path}: is {_kind(mode)}, not a regular file; refused before reading "
        "(a FIFO or a device can block or never end)"
    )


def open_regular(path: str | Path, error: type[Exception] = ValueError):
    """Open `path` for binary reading after checking that it is a regular
    file (following links: a link to a device is refused too); raise
    `error` naming the path otherwise. A missing file raises
    FileNotFoundError as `open` would."""
    path = Path(path)
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _refuse(path, mode, error)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, mode, error)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, error: type[Exception] = ValueError) -> bytes:
    """The bytes of a regular file; a file that cannot be read raises
    `error` naming the path (a missing one FileNotFoundError)."""
    path = Path(path)
    try:
        with open_regular(path, error) as f:
            return f.read()
    except FileNotFoundError:
        raise
    except OSError as failure:
        raise error(f"{path}: cannot read: {failure.strerror or failure}") from None


def read_text(path: str | Path, error: type[Exception] = ValueError) -> str:
    """The UTF-8 text of a regular file, `error` naming the path otherwise."""
    try:
        return read_bytes(path, error).decode("utf-8")
    except UnicodeDecodeError as failure:
        raise error(f"{path}: not UTF-8 text ({failure.reason} at byte {failure.start})") from None


def read_json(path: str | Path, error: type[Exception] = ValueError) -> dict[str, Any]:
    """A JSON object from a regular file; anything else (not UTF-8 JSON,
    not an object, a key twice in one object) raises `error` naming the file."""
    path = Path(path)
    data = read_bytes(path, error)

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise error(f"{path}: key {key!r} appears twice in one object")
            seen[key] = value
        return seen

    try:
        parsed = json.loads(data.decode("utf-8"), object_pairs_hook=unique)
    except (UnicodeDecodeError, json.JSONDecodeError) as failure:
        raise error(f"{path}: not valid JSON ({failure})") from None
    if not isinstance(parsed, dict):
        raise error(f"{path}: must hold a JSON object, got {type(parsed).__name__}")
    return parsed
