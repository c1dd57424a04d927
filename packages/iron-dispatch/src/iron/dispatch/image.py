"""Images: what a backend compiles a runlist and its layout into.

An `Image` is what a backend loads: for every step the operator and where
each of its buffers lives, which per-call values it takes from which word
of the parameter scratchpad, the arena sizes, and the device programs
(`iron.dispatch.program`) with the designs they run. It lives in memory
only: operators and designs carry code (references, kernel models), so the
compile cache keeps the image's data artifacts (programs as JSON, MLIR,
kernel objects, ELFs), never the image. `build` makes one.
"""

from __future__ import annotations

from typing import NamedTuple

import attrs
import numpy as np

from iron.core import Operator, View
from iron.core.capture import Expr
from iron.design import Design
from iron.dispatch.layout import Layout
from iron.dispatch.program import Program, plan_programs, step_design
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

    @property
    def bindings(self) -> tuple[tuple[str, int, int], ...]:
        """The bound members as `iron.dispatch.values` bindings."""
        return tuple((m, w, 0) for m, w in self.words) + tuple(
            (m, -1, c) for m, c in self.constants
        )


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
    trace_size: int = 0  # bytes of the trace buffer argument (0: not traced)
    programs: tuple[Program, ...] = ()  # device programs: one (fused) or one per step
    designs: dict[str, Design] = attrs.field(factory=dict)  # digest -> design
    elves: tuple[str, ...] = ()  # per program, what XRT loads (set by the compile pipeline)

    def design_summary(self) -> str:
        """``3 of 5 steps ran designs; 2 fell back to host models (RMSNorm x2)``."""
        return design_summary([self])


def design_summary(images) -> str:
    """How many steps of `images` run designs on the device and which
    operators fall back to host models, counted over every program."""
    total, fallbacks = 0, {}
    for image in images:
        for program in image.programs:
            for step in program.steps:
                total += 1
                if step.device is None:
                    fallbacks[step.operator] = fallbacks.get(step.operator, 0) + 1
    back = sum(fallbacks.values())
    listed = ", ".join(f"{op} x{n}" for op, n in sorted(fallbacks.items()))
    tail = f"; {back} fell back to host models ({listed})" if back else ""
    return f"{total - back} of {total} steps ran designs{tail}"


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
    runlist: Runlist,
    layout: Layout,
    *,
    backend: str,
    mode: str,
    flags=(),
    max_words=None,
    trace_size: int = 0,
    programs: bool = False,
) -> Image:
    """The image of `runlist` laid out by `layout`; with `programs`, also
    its device programs and the designs they run (a backend with a device)."""
    if trace_size < 0 or trace_size % 4:
        raise CompileError(
            f"{runlist.name}: trace_size {trace_size} must be a non-negative multiple of 4 bytes"
        )
    per_step, parameters = parameter_table(runlist, max_words)
    steps, unique = [], {}  # equal operators share one object (16 layers: one each)
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
    image = Image(
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
        trace_size=trace_size,
    )
    if not programs:
        return image
    designs, by_digest, known = {}, {}, {}  # equal operators recur across layers: one design each
    for index, step in enumerate(image.steps):
        if step.op not in known:
            design = step_design(step.op, f"{runlist.name} step {index} ({type(step.op).__name__})")
            known[step.op] = None if design is None else (design, design.digest())
        if known[step.op] is not None:
            designs[index] = known[step.op]
            by_digest.setdefault(known[step.op][1], known[step.op][0])
    return attrs.evolve(image, programs=plan_programs(image, designs), designs=by_digest)
