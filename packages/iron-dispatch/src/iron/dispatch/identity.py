"""Cache identity: the text that decides what an image is, and the source
digests in it.

A `Sources` (one per session) keeps each source file's digest per (path,
mtime, size): a file edited while the process runs is read again, an
unchanged one costs a `stat`. (Hashing IRON's own sources from scratch
costs about 0.7 ms, a third of a warm compile.)
"""

from __future__ import annotations

import hashlib
import inspect
import os
from pathlib import Path

import iron.alloc
import iron.core
import iron.core.files
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


class Sources:
    """Digests of source files, each read again only when its mtime or size
    moved; what `key_text` hashes of IRON's own code and of operator modules."""

    def __init__(self) -> None:
        self._digests: dict[tuple[str, int, int], str] = {}
        self._files: dict[type, str | None] = {}
        self._project: tuple[tuple[str, str], ...] | None = None

    def file_digest(self, path: str | os.PathLike) -> str:
        """Digest of a file's bytes, read again whenever its mtime or size moved."""
        stat = os.stat(path)
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in self._digests:
            self._digests[key] = hashlib.sha256(iron.core.files.read_bytes(path)).hexdigest()
        return self._digests[key]

    def project_digest(self) -> str:
        """Digest of IRON's own runtime sources (core, alloc, design, dispatch),
        listed once (a module added later matters only through an edit of one
        that imports it)."""
        if self._project is None:
            self._project = tuple(
                (str(path), str(path.relative_to(root.parent)))
                for root in PROJECT_ROOTS
                for path in sorted(root.rglob("*.py"))
            )
        h = hashlib.sha256()
        for path, name in self._project:
            h.update(f"{name} {self.file_digest(path)}\n".encode())
        return h.hexdigest()

    def code_identity(self, cls: type) -> str:
        """Digest of the module that defines an operator (its reference, its
        shape rule and its design live there); its qualified name where the
        class has no source file."""
        if cls not in self._files:
            self._files[cls] = inspect.getsourcefile(cls)
        source = self._files[cls]
        return self.file_digest(source) if source else cls.__qualname__


def key_text(runlist: Runlist, layout: Layout, image_parts: dict, sources: Sources) -> str:
    """Everything that decides what an image is, as text: sources, every
    step's operator identity (object addresses are refused by
    `Operator.identity_text`), buffers, bindings and the values of the
    per-call members it leaves unbound, the layout, and
    `image_parts` (backend, mode, flags, device); `sources` digests the code."""
    classes = sorted(
        {type(s.op) for s in runlist.steps}, key=lambda c: (c.__module__, c.__qualname__)
    )
    lines = [f"project {sources.project_digest()}"]
    lines += [f"code {c.__module__}.{c.__qualname__} {sources.code_identity(c)}" for c in classes]
    texts: dict = {}  # equal operators recur across layers: one identity text each
    for s in runlist.steps:
        text = texts.get(s.op) or texts.setdefault(s.op, s.op.identity_text())
        bound = f" {sorted((m, str(e)) for m, e in s.bindings.items())}" if s.bindings else ""
        # a per-call member left unbound runs at its field value, which the
        # identity leaves out (FLMGemm(max_M=512, M=256) is max_M=512's build)
        unbound = [(m, getattr(s.op, m)) for m in s.op.per_call_members() if m not in s.bindings]
        fixed = f" defaults {unbound}" if unbound else ""
        lines.append(f"step {text} {s.args}{bound}{fixed}")
    lines += [f"layout {arena} {sorted(table.items())}" for arena, table in layout.arenas.items()]
    lines.append(f"host-addressed {sorted(layout.host_addressed)}")
    lines += [f"{k} {v}" for k, v in sorted(image_parts.items())]
    return "\n".join(lines)
