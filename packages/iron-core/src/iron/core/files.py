"""Files a command reads or writes, checked before they are opened.

A path where a file belongs may hold a FIFO (a reader waits on it forever),
a device (`/dev/zero` never ends; opening some devices acts), a socket or
a folder. Reads check the kind with `stat` before opening (so such a path
is never opened at all), open without blocking, and check the opened
descriptor again (so a file swapped in between is refused too). Writes go
to a new file in the target's folder, renamed over the target only when
that is a regular file or nothing: a FIFO or a device is never written
through nor replaced (as root, not even `/dev/null`).

JSON comes back as an object whose keys are unique (a key given twice is
refused, not silently the last one), and `expect` checks a value's JSON
type, naming the file and the field: a string where a number belongs, a
float where an integer belongs, a number where true or false belongs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

_KINDS = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISREG, "a regular file"),
)
#: reading never waits on a FIFO that slipped past the first check
_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)


class NotRegularFile(ValueError):
    """A path where a regular file belongs holds something else, or a
    folder that should exist does not: the message names the path."""


def file_kind(mode: int) -> str:
    """What a `st_mode` is, as an error names it ("a FIFO")."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refused(path, mode: int, why: str, error: type[Exception]) -> Exception:
    return error(f"{path}: is {file_kind(mode)}, not a regular file; {why}")


_READ_WHY = "refused before reading (a FIFO or a device can block or never end)"


def open_regular(
    path: str | os.PathLike, error: type[Exception] = NotRegularFile, *, follow_links: bool = True
) -> IO[bytes]:
    """`path` opened for binary reading once it is known to be a regular
    file; `error` naming it otherwise. With `follow_links` a link to a
    regular file is read and a link to a device refused; without, a link
    is refused (and never opened: ``O_NOFOLLOW``). A missing file raises
    `FileNotFoundError` as `open` would."""
    mode = (os.stat if follow_links else os.lstat)(path).st_mode
    if not stat.S_ISREG(mode):
        raise _refused(path, mode, _READ_WHY, error)
    try:
        fd = os.open(path, _READ | (0 if follow_links else _NO_FOLLOW))
    except OSError:
        if not follow_links and os.path.islink(path):  # swapped for a link since the lstat
            raise _refused(path, stat.S_IFLNK, _READ_WHY, error) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refused(path, mode, _READ_WHY, error)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(
    path: str | os.PathLike,
    error: type[Exception] = NotRegularFile,
    *,
    limit: int | None = None,
    follow_links: bool = True,
) -> bytes:
    """The bytes of a regular file (`open_regular`); a file over `limit`
    bytes, or one that cannot be read, raises `error` naming it (a missing
    one `FileNotFoundError`)."""
    try:
        with open_regular(path, error, follow_links=follow_links) as handle:
            if limit is None:
                return handle.read()
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise
    except OSError as failure:
        raise error(f"{path}: cannot read: {failure.strerror or failure}") from None
    if len(data) > limit:
        raise error(f"{path}: is over {limit} bytes, more than such a file ever holds")
    return data


def read_text(path: str | os.PathLike, error: type[Exception] = NotRegularFile, **options) -> str:
    """The UTF-8 text of a regular file (`read_bytes` and its options)."""
    return _decode(read_bytes(path, error, **options), path, error)


def _decode(data: bytes, where, error: type[Exception]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as failure:
        raise error(f"{where}: not UTF-8 text ({failure.reason} at byte {failure.start})") from None


def parse_json(text: str | bytes, where, error: type[Exception] = ValueError) -> dict[str, Any]:
    """The JSON object `text` holds; anything else (not JSON, not an
    object, a key twice in one object) raises `error` naming `where`."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in pairs:
            if key in found:
                raise error(f"{where}: key {key!r} appears twice in one object")
            found[key] = value
        return found

    if isinstance(text, bytes):
        text = _decode(text, where, error)
    try:
        data = json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as failure:
        raise error(f"{where}: not valid JSON ({failure})") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply to be a file IRON reads") from None
    if not isinstance(data, dict):
        raise error(f"{where}: must hold a JSON object, not {json_kind(data)}")
    return data


def read_json(
    path: str | os.PathLike, error: type[Exception] = NotRegularFile, **options
) -> dict[str, Any]:
    """`parse_json` of a regular file's bytes (`read_bytes` and its options)."""
    return parse_json(read_bytes(path, error, **options), path, error)


# ---- JSON types ----------------------------------------------------------------


def json_kind(value: Any) -> str:
    """A value's JSON type as an error names it ("a string")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    for kind, name in ((int, "an integer"), (float, "a number"), (str, "a string"),
                       (dict, "an object"), (list, "an array")):  # fmt: skip
        if isinstance(value, kind):
            return name
    return type(value).__name__


#: the JSON types a field may hold: (name, test); bools are never numbers
KINDS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    ("a number", lambda v: (
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    )),
    ("true or false", lambda v: isinstance(v, bool)),
    ("a string", lambda v: isinstance(v, str)),
    ("an object", lambda v: isinstance(v, dict)),
    ("an array", lambda v: isinstance(v, list)),
    ("null", lambda v: v is None),
)  # fmt: skip


def expect(where, field: str, value: Any, *kinds: str, error: type[Exception] = ValueError):
    """`value` if its JSON type is one of `kinds` (names of `KINDS`: "an
    integer", "a number", "true or false", "a string", "an object", "an
    array", "null"); else `error` naming `where`, the field, the value and
    both types."""
    tests = dict(KINDS)
    if any(tests[kind](value) for kind in kinds):
        return value
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    raise error(f"{where}: {field}={shown}: must be {' or '.join(kinds)}, not {json_kind(value)}")


# ---- writing -------------------------------------------------------------------


def write_target(path: str | os.PathLike, error: type[Exception] = NotRegularFile) -> Path:
    """Where a write of `path` lands: the file a link points to, which
    must be a regular file or nothing, in a folder that exists; `error`
    naming the path otherwise."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise _refused(path, mode, "refused: a write would go through it or replace it", error)
    if not target.parent.is_dir():
        raise error(f"{path}: the folder {target.parent} does not exist")
    return target


@contextlib.contextmanager
def replacing(
    path: str | os.PathLike, error: type[Exception] = NotRegularFile, *, text: bool = True
) -> Iterator[IO]:
    """A new file in the target's folder (`write_target`), open for
    writing (UTF-8 text, or bytes); when the block ends it is renamed over
    the target, which is checked again first. A failure or an interrupt
    leaves the target as it was and nothing else behind. The new file takes
    the old one's permissions, or the umask's."""
    target = write_target(path, error)
    try:
        old_mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        old_mode = None
    while True:
        partial = target.parent / f".{target.name}.{secrets.token_hex(4)}.partial"
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW, 0o666)
            break
        except FileExistsError:
            continue
    try:
        if old_mode is not None and hasattr(os, "fchmod"):
            os.fchmod(fd, old_mode)
        with open(fd, "w", encoding="utf-8") if text else open(fd, "wb") as handle:
            yield handle
        write_target(path, error)  # planted as a FIFO meanwhile? then it stays
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def require_directory(path: str | os.PathLike, what: str, error: type[Exception] = NotRegularFile):
    """`path` as a Path if it is a folder (a link to one counts); `error`
    naming `what` and the path, and what is there instead, otherwise."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{what} {path}: no such folder") from None
    if not stat.S_ISDIR(mode):
        raise error(f"{what} {path}: is {file_kind(mode)}, not a folder")
    return path
