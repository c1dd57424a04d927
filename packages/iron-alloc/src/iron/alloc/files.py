"""The files the planner's benchmark reads and its pictures are written to,
checked first. iron-alloc depends on numpy alone, so this is its own small
copy of what iron-core's `iron.core.files` does for every other package: a
path where a file belongs that is a FIFO (a reader would wait forever), a
device, a socket or a folder is refused, naming it, before it is opened;
a picture is written to a new file in the target's folder and renamed
over the target only when that is a regular file or nothing."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))  # fmt: skip


class NotRegularFile(ValueError):
    """A path where a regular file belongs holds something else."""


def _refuse(path, mode: int, why: str) -> NotRegularFile:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return NotRegularFile(f"{path}: is {kind}, not a regular file; {why}")


def open_text(path: str | os.PathLike) -> Iterator[str]:
    """`path` opened as UTF-8 text once `stat` (before) and `fstat` (after a
    non-blocking open) say it is a regular file; `NotRegularFile` otherwise."""
    why = "refused before reading (a FIFO or a device can block or never end)"
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _refuse(path, mode, why)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, mode, why)
        return open(fd, newline="", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def write_target(path: Path) -> Path:
    """Where a write of `path` lands (the file a link names): a regular
    file or nothing, else `NotRegularFile`."""
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(target).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, mode, "refused: a write would go through it or replace it")
    return target


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A new file's path in the target's folder to write; renamed over the
    target (checked again first) when the block ends, removed otherwise."""
    target = write_target(Path(path))
    partial = target.parent / f".{target.name}.{secrets.token_hex(4)}.partial"
    try:
        yield partial
        write_target(Path(path))
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
