"""Images: what a backend compiles a runlist and its layout into.

An `Image` is plain, picklable data: for every step the operator and where
each of its buffers lives, which per-call values it takes from which word
of the parameter scratchpad, and the arena sizes. The compile cache stores
images; loading one back gives the same program. `build` makes one.
"""

from __future__ import annotations

import pickle
from typing import NamedTuple

import attrs
import numpy as np

from iron.core import Operator, View
from iron.core.capture import Expr
from iron.dispatch.layout import Layout
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
