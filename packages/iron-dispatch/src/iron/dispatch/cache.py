"""The compile cache: content-keyed, atomic, safe across processes.

An entry is a directory ``<root>/<key[:2]>/<key>/`` holding the artifact and
a ``meta.json`` with its size and sha256. It is written into a temporary
directory beside it and renamed into place, under a per-key file lock, so
two processes compiling one key compile once and both read a whole entry.
An entry that fails validation (truncated, wrong checksum) is rebuilt, never
served. The root is ``IRON_CACHE_HOME``, else the user cache directory +
``/iron`` (`iron.core.settings`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from iron.core import settings

try:
    import fcntl
except ImportError:  # not on Windows: a plain exclusive lock file instead
    fcntl = None

ARTIFACT = "artifact.bin"
META = "meta.json"


def cache_home() -> Path:
    """Where compiled images are kept: ``IRON_CACHE_HOME`` or its default."""
    return settings.current().cache_home


class CompileCache:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else cache_home()

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def read(self, key: str) -> bytes | None:
        """The artifact under `key`, or None if absent or invalid."""
        entry = self.entry(key)
        try:
            meta = json.loads((entry / META).read_text())
            data = (entry / ARTIFACT).read_bytes()
        except (OSError, ValueError):
            return None
        if (
            meta.get("key") != key
            or meta.get("nbytes") != len(data)
            or meta.get("sha256") != hashlib.sha256(data).hexdigest()
        ):
            return None
        return data

    def get_or_build(self, key: str, build: Callable[[], bytes], **meta) -> tuple[bytes, bool]:
        """(artifact, hit). On a miss `build()` runs once across processes."""
        data = self.read(key)
        if data is not None:
            return data, True
        with self._lock(key):
            data = self.read(key)  # another process may have built it meanwhile
            if data is not None:
                return data, True
            data = build()
            self._write(key, data, meta)
            return data, False

    def _write(self, key: str, data: bytes, meta: dict) -> None:
        entry = self.entry(key)
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
        try:
            (staging / ARTIFACT).write_bytes(data)
            record = {
                **meta,
                "key": key,
                "nbytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "created": time.time(),
            }
            (staging / META).write_text(json.dumps(record, indent=1))
            if entry.exists():  # an invalid entry: replace it whole
                shutil.rmtree(entry)
            os.rename(staging, entry)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    @contextlib.contextmanager
    def _lock(self, key: str):
        path = self.root / key[:2] / f"{key}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is not None:
            with open(path, "w") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
            return
        while True:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                break
            except FileExistsError:
                time.sleep(0.05)
        try:
            yield
        finally:
            os.close(fd)
            os.unlink(path)

    # ---- maintenance ----

    def entries(self) -> list[dict]:
        found = []
        for meta in sorted(self.root.glob(f"*/*/{META}")):
            try:
                found.append({**json.loads(meta.read_text()), "path": str(meta.parent)})
            except (OSError, ValueError):
                found.append({"path": str(meta.parent), "invalid": True})
        return found

    def info(self) -> dict:
        entries = self.entries()
        return {
            "root": str(self.root),
            "entries": len(entries),
            "bytes": sum(e.get("nbytes", 0) for e in entries),
        }

    def clear(self) -> int:
        """Remove every entry (only the cache's own two-level folders)."""
        count = len(self.entries())
        if self.root.exists():
            for child in self.root.iterdir():
                if child.is_dir() and len(child.name) == 2:
                    shutil.rmtree(child)
        return count
