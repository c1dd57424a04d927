"""Images: what a backend compiles a sequence into, and how one runs.

An `Image` is plain, picklable data: for every step the operator and where
each of its buffers lives, which per-call values it takes from which word
of the parameter scratchpad, and the arena sizes. The compile cache stores
images; loading one back gives the same program.
"""

from __future__ import annotations

import hashlib
import inspect
import pickle
from collections.abc import Callable
from functools import cache
from typing import NamedTuple

import attrs
import numpy as np

from iron.core import Operator, View
from iron.core.capture import Expr
from iron.dispatch.layout import Layout
from iron.dispatch.memory import DeviceBuffer, view
from iron.dispatch.runlist import Runlist

#: words in a full ELF's parameter scratchpad (XRT `get_ctrl_scratchpad_bo`)
PARAMETER_WORDS = 32


class CompileError(ValueError):
    """A sequence that cannot become an image for this backend."""


class Placement(NamedTuple):
    arena: str
    offset: int
    nbytes: int
    dtype: np.dtype
    shape: tuple[int, ...]


class ImageStep(NamedTuple):
    op: Operator
    names: tuple[str | View, ...]
    args: tuple[Placement, ...]
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    words: tuple[tuple[str, int], ...]  # per-call member -> parameter word
    constants: tuple[tuple[str, int], ...]  # per-call member bound to a constant


@attrs.frozen
class Image:
    backend: str
    mode: str
    name: str
    device: str
    flags: tuple[str, ...]
    steps: tuple[ImageStep, ...]
    sizes: dict[str, int]  # arena -> bytes this image needs
    inputs: tuple[tuple[str, int, int], ...]  # name, offset, nbytes in the input arena
    outputs: tuple[tuple[str, int, int], ...]
    residents: tuple[tuple[str, int, int], ...]  # scratch buffers with a host address
    transients: tuple[tuple[int, int], ...]  # scratch ranges a run may treat as garbage
    parameters: tuple[Expr, ...]  # word i holds parameters[i] on every call

    def to_bytes(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def from_bytes(data: bytes) -> Image:
        image = pickle.loads(data)
        if not isinstance(image, Image):
            raise TypeError("not an IRON image")
        return image


def parameter_table(runlist: Runlist, max_words: int | None):
    """Per step: (member, word) pairs and constant members; and the words.
    Expressions that always hold the same number share a word."""
    words: dict[Expr, int] = {}
    per_step = []
    for step in runlist.steps:
        bound, constants = [], []
        for member, expression in step.bindings.items():
            if not expression.terms:
                constants.append((member, expression.const))
            else:
                bound.append((member, words.setdefault(expression, len(words))))
        per_step.append((tuple(bound), tuple(constants)))
    if max_words is not None and len(words) > max_words:
        listed = ", ".join(str(e) for e in words)
        raise CompileError(
            f"{runlist.name}: {len(words)} distinct per-call values exceed the parameter "
            f"scratchpad's {max_words} words ({listed}); bind fewer distinct expressions"
        )
    return per_step, tuple(words)


def build(
    runlist: Runlist, layout: Layout, *, backend: str, mode: str, flags=(), max_words=None
) -> Image:
    per_step, parameters = parameter_table(runlist, max_words)
    steps, unique = [], {}  # equal operators share one object: the image pickles each once
    for step, (words, constants) in zip(runlist.steps, per_step):
        args = []
        for name, spec in zip(step.args, step.specs):
            arena, offset, nbytes = layout.locate(name)
            args.append(Placement(arena, offset, nbytes, spec.dtype, spec.shape))
        reads = tuple(i for i, s in enumerate(step.specs) if s.reads)
        writes = tuple(i for i, s in enumerate(step.specs) if s.writes)
        op = unique.setdefault(step.op, step.op)
        steps.append(ImageStep(op, step.args, tuple(args), reads, writes, words, constants))
    kept = layout.host_addressed
    residents = tuple((n, *layout.scratch[n]) for n in sorted(layout.scratch) if n in kept)
    transients = tuple(layout.scratch[n] for n in sorted(layout.scratch) if n not in kept)
    return Image(
        backend=backend,
        mode=mode,
        name=runlist.name,
        device=runlist.device.key if runlist.device else "unresolved",
        flags=tuple(sorted(flags)),
        steps=tuple(steps),
        sizes={a: layout.size(a) for a in ("input", "output", "scratch")},
        inputs=tuple((n, *layout.input[n]) for n in runlist.inputs),
        outputs=tuple((n, *layout.output[n]) for n in runlist.outputs),
        residents=residents,
        transients=transients,
        parameters=parameters,
    )


# ---- cache identity ------------------------------------------------------------


def _digest_files(paths) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(str(path.name).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@cache
def project_digest() -> str:
    """Digest of IRON's own runtime sources (core, alloc, dispatch): a change
    to any of them may change what an image means. Read once per process."""
    from pathlib import Path

    import iron.alloc
    import iron.core
    import iron.dispatch

    files = []
    for package in (iron.core, iron.alloc, iron.dispatch):
        root = Path(package.__file__).parent
        files += sorted(root.rglob("*.py"))
    return _digest_files(files)


@cache
def code_identity(cls: type) -> str:
    """Digest of the module that defines an operator: its reference, its
    shape rule and its design live there."""
    from pathlib import Path

    source = inspect.getsourcefile(cls)
    return _digest_files([Path(source)]) if source else cls.__qualname__


def key_text(runlist: Runlist, layout: Layout, image_parts: dict) -> str:
    """Everything that decides what an image is, as text (object addresses
    are refused by `Operator.identity_text`)."""
    classes = sorted(
        {type(s.op) for s in runlist.steps}, key=lambda c: (c.__module__, c.__qualname__)
    )
    lines = [f"project {project_digest()}"]
    lines += [f"code {c.__module__}.{c.__qualname__} {code_identity(c)}" for c in classes]
    texts: dict = {}  # equal operators recur across layers: one identity text each
    lines += [
        f"step {texts.get(s.op) or texts.setdefault(s.op, s.op.identity_text())} {s.args}"
        for s in runlist.steps
    ]
    lines += [f"layout {arena} {sorted(table.items())}" for arena, table in layout.arenas.items()]
    lines += [f"{k} {v}" for k, v in sorted(image_parts.items())]
    return "\n".join(lines)


# ---- running -------------------------------------------------------------------


def kernel(op: Operator, use_device_model: bool) -> Callable:
    """How one step computes: the operator's `simulate` (a model of the
    device kernel) where asked and defined, else its reference. Unbound
    per-call members take their field values."""
    fn = getattr(op, "simulate", None) if use_device_model else None
    fn = fn or op.reference
    defaults = {m: getattr(op, m) for m in op.per_call_members()}

    def run(*arrays, **values):
        out = fn(*arrays, **{**defaults, **values})
        return out if isinstance(out, tuple) else (out,)

    return run


@attrs.define
class BoundStep:
    index: int
    step: ImageStep
    run: Callable
    arrays: list[np.ndarray]
    constants: dict[str, int]

    def __call__(self, words) -> None:
        step = self.step
        values = {member: int(words[w]) for member, w in step.words}
        values.update(self.constants)
        outputs = self.run(*(self.arrays[i] for i in step.reads), **values)
        for i, out in zip(step.writes, outputs):
            self.arrays[i][...] = out


def bind(image: Image, memory: dict[str, np.ndarray], use_device_model: bool) -> list[BoundStep]:
    """Steps with typed views into `memory` (arena -> byte array) ready to run."""
    bound = []
    for index, step in enumerate(image.steps):
        arrays = [view(memory[p.arena], p.offset, p.nbytes, p.dtype, p.shape) for p in step.args]
        bound.append(
            BoundStep(index, step, kernel(step.op, use_device_model), arrays, dict(step.constants))
        )
    return bound


def evaluate(parameters: tuple[Expr, ...], values: dict[str, int]) -> np.ndarray:
    return np.array([e.evaluate(values) for e in parameters], dtype=np.int64)


def allocate(
    image: Image, *, granule: int, unified: bool, scratch: DeviceBuffer | None = None
) -> dict[str, DeviceBuffer]:
    """Fresh input and output buffers for `image` (and scratch, unless shared)."""
    buffers = {
        arena: DeviceBuffer(
            image.sizes[arena], granule=granule, unified=unified, name=f"{image.name}.{arena}"
        )
        for arena in ("input", "output")
    }
    buffers["scratch"] = scratch or DeviceBuffer(
        image.sizes["scratch"], granule=granule, unified=unified, name=f"{image.name}.scratch"
    )
    for arena, table in (("input", image.inputs), ("output", image.outputs)):
        for name, offset, nbytes in table:
            buffers[arena].register(name, offset, nbytes)
    for name, offset, nbytes in image.residents:
        buffers["scratch"].register(name, offset, nbytes)
    return buffers
