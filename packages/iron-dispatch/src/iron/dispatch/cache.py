"""The compile cache: content-keyed folders of data, atomic, safe across
processes, and careful with folders that are not its own.

An entry is a folder ``<root>/<key[:2]>/<key>/`` (the key: 64 hex digits)
of plain files (JSON, MLIR text, kernel objects, ELFs) and a manifest,
``iron-cache.json``, listing every file with its size and sha256. Nothing
in an entry is ever executed or unpickled: the cache reads bytes and JSON.
An entry is built in a staging folder beside it and renamed into place
under a per-key file lock, so two processes compiling one key compile once;
a failed build leaves nothing behind.

An entry that fails validation (no manifest, a manifest that is truncated,
not a JSON object or not a regular file, a file whose size or checksum
differs or that is not a regular file, a folder replaced by a file or a
symlink, or contents the caller rejects) is a miss: it is rebuilt, and the
new manifest says what was repaired, which `iron cache info` lists.
`clear` removes only entries with the cache's manifest (and its own locks
and staging folders) and leaves anything else in the root alone.

Nothing under the root is followed if it is a symlink (the root itself may
be one): a planted ``<key>.lock``, ``CACHEDIR.TAG`` or prefix folder that
is a link is replaced by the cache's own (the link removed, its target
never touched); files are opened with ``O_NOFOLLOW`` and ``O_NONBLOCK``
and read only if they are regular files, so a FIFO or a link to a device
cannot hang or flood a compile or ``iron cache info``. Locks are
`filelock` locks, opened without following links. The root is
``IRON_CACHE_HOME``, else the user cache directory + ``/iron``
(`iron.core.settings`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import filelock

from iron.core import files, settings
from iron.core.files import NotRegularFile

MANIFEST = "iron-cache.json"
FORMAT = "iron-cache/2"
STAGING_MARK = ".iron-staging"
#: the Cache Directory Tagging Specification's signature, so backup tools skip the cache
CACHEDIR_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# the IRON compile cache\n"
_KEY = re.compile(r"[0-9a-f]{64}\Z")
#: a manifest larger than this is not one the cache wrote (a 300-step image's is ~20 KiB)
MANIFEST_MAX_BYTES = 16 * 2**20


def read_json(path: Path) -> dict:
    """A JSON object of at most `MANIFEST_MAX_BYTES` (no key twice), read
    only if it is a regular file and never through a link (`NotRegularFile`)."""
    return files.read_json(path, limit=MANIFEST_MAX_BYTES, follow_links=False)


def _entry_file_sha256(path: Path) -> tuple[int, str]:
    """(bytes, sha256) of a regular file of an entry, never through a link."""
    h, nbytes = hashlib.sha256(), 0
    with files.open_regular(path, follow_links=False) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
            nbytes += len(block)
    return nbytes, h.hexdigest()


#: manifest fields and their JSON types (anything else there is kept as written)
MANIFEST_FIELDS = {
    "format": ("a string",), "key": ("a string",), "files": ("an object",),
    "created": ("a number",), "repaired": ("a string",), "name": ("a string",),
    "backend": ("a string",), "mode": ("a string",), "kind": ("a string",),
    "packaging": ("an object",),
    "configuration": ("a string",), "statements": ("an integer",),
}  # fmt: skip


def _manifest_problem(manifest: dict) -> str | None:
    """What is wrong with a manifest's fields (their JSON types, each file
    record's), or None."""
    for field, kinds in MANIFEST_FIELDS.items():
        if field in manifest or field in ("format", "key", "files"):
            try:
                files.expect(MANIFEST, field, manifest.get(field), *kinds)
            except ValueError as error:
                return str(error)
    for name, record in manifest["files"].items():
        if Path(name).is_absolute() or ".." in Path(name).parts:
            return f"{MANIFEST}: files names {name!r}, which lies outside the entry"
        try:
            files.expect(MANIFEST, f"files[{name!r}]", record, "an object")
            files.expect(MANIFEST, f"files[{name!r}].nbytes", record.get("nbytes"), "an integer")
            files.expect(MANIFEST, f"files[{name!r}].sha256", record.get("sha256"), "a string")
        except ValueError as error:
            return str(error)
    return None


def _replace_link(path: Path) -> None:
    """Unlink `path` if it is a symlink or anything but a folder (a link's
    target is never touched), so the cache can make its own there."""
    with contextlib.suppress(FileNotFoundError):
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
            path.unlink()


def cache_home() -> Path:
    """Where compiled programs are kept: ``IRON_CACHE_HOME`` or its default."""
    return settings.current().cache_home


def file_sha256(path: Path) -> str:
    """sha256 of a regular file's bytes (a FIFO or a device is refused)."""
    h = hashlib.sha256()
    with files.open_regular(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class CompileCache:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else cache_home()

    def entry(self, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"a cache key is 64 lowercase hex digits, got {key!r}")
        return self.root / key[:2] / key

    # ---- reading ----

    def check(self, key: str, *, verify: bool = True) -> tuple[dict | None, str | None]:
        """(manifest, None) for a valid entry; (None, why) otherwise, why
        being None when there is simply no entry. `verify` False: each
        file's size is checked, not its bytes (no file is read)."""
        entry = self.entry(key)
        if entry.parent.is_symlink():
            return None, f"the prefix folder {entry.parent.name} was a symlink"
        if entry.is_symlink():
            return None, "the entry was a symlink"
        if not entry.exists():
            return None, None
        if not entry.is_dir():
            return None, "the entry's folder was a file"
        try:
            manifest = read_json(entry / MANIFEST)
        except FileNotFoundError:
            return None, "the manifest was missing"
        except OSError:
            return None, "the manifest was unreadable"
        except ValueError as error:  # not a regular file, not a JSON object, a key twice
            return None, f"the manifest {MANIFEST} was refused: {error}"
        problem = _manifest_problem(manifest)
        if problem:
            return None, f"the manifest {MANIFEST} was refused: {problem}"
        if manifest["format"] != FORMAT or manifest["key"] != key:
            return None, "the manifest was another format or key"
        for name, record in manifest["files"].items():
            try:
                if verify:
                    found = _entry_file_sha256(entry / name)
                else:
                    found = ((entry / name).lstat().st_size, record["sha256"])
            except NotRegularFile as error:
                return None, f"file {name} was refused: {error}"
            except OSError:
                found = None
            if found != (record["nbytes"], record["sha256"]):
                return None, f"file {name} was missing or changed"
        return manifest, None

    def get_or_build(
        self,
        key: str,
        build: Callable[[Path], dict | None],
        *,
        accept: Callable[[Path], bool] | None = None,
        **meta,
    ) -> tuple[Path, bool]:
        """(entry folder, hit). On a miss ``build(staging)`` writes the
        entry's files into `staging` (and may return more manifest fields);
        it runs once across processes. `accept(entry)` may reject a valid
        entry's contents (it is then repaired like an invalid one)."""
        entry, why = self._valid(key, accept)
        if entry is not None:
            return entry, True
        with self._lock(key):
            entry, why = self._valid(key, accept)  # another process may have built it meanwhile
            if entry is not None:
                return entry, True
            return self._write(key, build, meta, repaired=why), False

    def _valid(self, key: str, accept) -> tuple[Path | None, str | None]:
        manifest, why = self.check(key)
        if manifest is None:
            return None, why
        entry = self.entry(key)
        if accept is not None and not accept(entry):
            return None, "the contents did not match what this compile expects"
        return entry, None

    # ---- writing ----

    def _prefix(self, key: str) -> Path:
        """The entry's prefix folder, made (in place of a link) if need be."""
        prefix = self.root / key[:2]
        _replace_link(prefix)
        prefix.mkdir(parents=True, exist_ok=True)
        return prefix

    def _write(self, key: str, build, meta: dict, repaired: str | None) -> Path:
        entry = self.entry(key)
        self._prefix(key)
        self._tag()
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
        try:
            (staging / STAGING_MARK).touch()
            extra = build(staging) or {}
            (staging / STAGING_MARK).unlink()
            files = {
                str(p.relative_to(staging)): {"nbytes": p.stat().st_size, "sha256": file_sha256(p)}
                for p in sorted(staging.rglob("*"))
                if p.is_file()
            }
            manifest = {**meta, **extra, "format": FORMAT, "key": key, "files": files,
                        "created": time.time()}  # fmt: skip
            if repaired:
                manifest["repaired"] = repaired
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
            self._remove_invalid(entry)
            os.rename(staging, entry)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return entry

    @staticmethod
    def _remove_invalid(entry: Path) -> None:
        """Clear the way for a rebuilt entry: a symlink or file is unlinked
        (a symlink's target is never touched), a folder removed."""
        if entry.is_symlink() or entry.is_file():
            entry.unlink()
        elif entry.exists():
            shutil.rmtree(entry)

    def _tag(self) -> None:
        """Write ``CACHEDIR.TAG`` unless it is already a regular file: a new
        file renamed over whatever is there (a link is replaced, not followed)."""
        tag = self.root / "CACHEDIR.TAG"
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(tag.lstat().st_mode):
                return
        fd, temporary = tempfile.mkstemp(prefix=".tag-", dir=self.root)
        with os.fdopen(fd, "w") as handle:
            handle.write(CACHEDIR_TAG)
        os.replace(temporary, tag)

    @contextlib.contextmanager
    def _lock(self, key: str):
        """The per-key lock, across processes (`filelock`, which opens the
        file without following a link; a planted link is removed first)."""
        path = self._prefix(key) / f"{key}.lock"
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(path.lstat().st_mode):
                path.unlink()
        with filelock.FileLock(path):
            yield

    # ---- maintenance ----

    def _prefixes(self) -> list[Path]:
        """The two-hex-digit folders, never through a symlink."""
        if not self.root.is_dir() or self.root.is_symlink():
            return []
        return [
            p
            for p in sorted(self.root.iterdir())
            if not p.is_symlink() and p.is_dir() and re.fullmatch(r"[0-9a-f]{2}", p.name)
        ]

    def _children(self):
        """Everything inside the two-hex-digit folders, never through a symlink."""
        for prefix in self._prefixes():
            yield from sorted(prefix.iterdir())

    def entries(self, *, verify: bool = True) -> list[dict]:
        """Every entry's manifest, or why it is invalid (`check`)."""
        found = []
        for child in self._children():
            if not _KEY.match(child.name) or child.name[:2] != child.parent.name:
                continue
            manifest, why = self.check(child.name, verify=verify)
            if manifest is None:
                found.append({"key": child.name, "path": str(child), "invalid": why})
            else:
                nbytes = sum(f["nbytes"] for f in manifest["files"].values())
                found.append({**manifest, "nbytes": nbytes, "path": str(child)})
        return found

    def info(self, *, verify: bool = True) -> dict:
        """Entries, bytes, repaired and invalid entries; `verify` False
        reads no entry's files, only their sizes (`iron doctor`'s summary)."""
        entries = self.entries(verify=verify)
        return {
            "root": str(self.root),
            "entries": sum("invalid" not in e for e in entries),
            "bytes": sum(e.get("nbytes", 0) for e in entries),
            # runtime-shaped steps' device configurations and per-value streams, apart
            "configurations": sum(e.get("kind") == "configuration" for e in entries),
            "streams": sum(e.get("kind") == "stream" for e in entries),
            "repaired": [e["key"] for e in entries if e.get("repaired")],
            "invalid": [e["key"] for e in entries if e.get("invalid")],
        }

    def clear(self) -> int:
        """Remove the cache's own entries, locks and staging folders; count
        the entries removed. Anything else (another tool's files, a symlink)
        stays, and so does a folder that still holds it."""
        removed = 0
        for child in list(self._children()):
            if child.is_symlink():
                continue
            if child.is_dir() and _KEY.match(child.name) and self._owned(child):
                # out of sight first: Ctrl-C mid-removal leaves no half entry under its key
                aside = child.parent / f".{child.name[:12]}-removing"
                (child / STAGING_MARK).touch()  # what lets a later clear finish the job
                os.rename(child, aside)
                shutil.rmtree(aside)
                removed += 1
            elif child.is_dir() and (child / STAGING_MARK).is_file() and child.name.startswith("."):
                shutil.rmtree(child)
            elif child.name.endswith(".lock") and _KEY.match(child.name[:-5]):
                child.unlink()  # ours by name; a regular file or not, never followed
        for prefix in self._prefixes():
            with contextlib.suppress(OSError):
                prefix.rmdir()  # only if now empty
        return removed

    @staticmethod
    def _owned(entry: Path) -> bool:
        """The folder holds this cache's manifest (valid or not, it is ours)."""
        try:
            manifest = read_json(entry / MANIFEST)
        except (OSError, ValueError):
            return False
        return isinstance(manifest, dict) and manifest.get("format") == FORMAT
