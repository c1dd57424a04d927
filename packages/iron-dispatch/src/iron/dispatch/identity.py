"""Cache identity: the text that decides what an image is, and the source
digests in it.

A source file's digest is kept per (path, mtime, size): a file edited while
the process runs is read again, an unchanged one costs a `stat`. (Hashing
IRON's own sources from scratch costs about 0.7 ms, a third of a warm
compile.)
"""

from __future__ import annotations

import hashlib
import inspect
import os
from functools import cache
from pathlib import Path

import iron.alloc
import iron.core
import iron.design
from iron.dispatch.layout import Layout
from iron.dispatch.runlist import Runlist

#: IRON's own runtime sources: a change to any of them may change what an image means
#: (iron-design's too: it emits the MLIR and simulates the designs)
PROJECT_ROOTS = tuple(
    Path(p).parent
    for p in (iron.core.__file__, iron.alloc.__file__, iron.design.__file__, __file__)
)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@cache
def _content_digest(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """Digest of a file's bytes, read again whenever its mtime or size moved."""
    stat = os.stat(path)
    return _content_digest(str(path), stat.st_mtime_ns, stat.st_size)


@cache
def _sources() -> tuple[tuple[str, str], ...]:
    """(path, name relative to `iron/`) of every module under `PROJECT_ROOTS`,
    listed once per process (a module added later matters only through an
    edit of one that imports it)."""
    return tuple(
        (str(path), str(path.relative_to(root.parent)))
        for root in PROJECT_ROOTS
        for path in sorted(root.rglob("*.py"))
    )


def project_digest() -> str:
    """Digest of IRON's own runtime sources (core, alloc, design, dispatch)."""
    h = hashlib.sha256()
    for path, name in _sources():
        h.update(f"{name} {file_digest(path)}\n".encode())
    return h.hexdigest()


@cache
def _source_file(cls: type) -> str | None:
    return inspect.getsourcefile(cls)


def code_identity(cls: type) -> str:
    """Digest of the module that defines an operator (its reference, its
    shape rule and its design live there); its qualified name where the
    class has no source file."""
    source = _source_file(cls)
    return file_digest(source) if source else cls.__qualname__


def key_text(runlist: Runlist, layout: Layout, image_parts: dict) -> str:
    """Everything that decides what an image is, as text: sources, every
    step's operator identity (object addresses are refused by
    `Operator.identity_text`), buffers and bindings, the layout, and
    `image_parts` (backend, mode, flags, device)."""
    classes = sorted(
        {type(s.op) for s in runlist.steps}, key=lambda c: (c.__module__, c.__qualname__)
    )
    lines = [f"project {project_digest()}"]
    lines += [f"code {c.__module__}.{c.__qualname__} {code_identity(c)}" for c in classes]
    texts: dict = {}  # equal operators recur across layers: one identity text each
    for s in runlist.steps:
        text = texts.get(s.op) or texts.setdefault(s.op, s.op.identity_text())
        bound = f" {sorted((m, str(e)) for m, e in s.bindings.items())}" if s.bindings else ""
        lines.append(f"step {text} {s.args}{bound}")
    lines += [f"layout {arena} {sorted(table.items())}" for arena, table in layout.arenas.items()]
    lines.append(f"host-addressed {sorted(layout.host_addressed)}")
    lines += [f"{k} {v}" for k, v in sorted(image_parts.items())]
    return "\n".join(lines)
