"""Run one `OperatorSequence` once: the quickest way to execute a runlist."""

from __future__ import annotations

import numpy as np

from iron.core import View
from iron.dispatch.executable import allocate
from iron.dispatch.memory import view
from iron.dispatch.runlist import Runlist
from iron.dispatch.sequence import OperatorSequence
from iron.dispatch.session import Session


def run(
    sequence: OperatorSequence,
    inputs: dict[str, np.ndarray],
    *,
    buffers: dict[str, np.ndarray] | None = None,
    values: dict[str, int] | None = None,
    backend: str = "reference",
    mode: str = "fused",
    poison: bool = True,
    session: Session | None = None,
) -> dict[str, np.ndarray]:
    """Outputs by name, after writing `inputs` and the host-addressed
    `buffers` (weights, states) and running once with per-call `values`,
    on `backend` of `session` (default: a session of this run's own)."""
    chosen = (session or Session()).backend(backend)
    runlist, layout = sequence.runlist, sequence.layout
    image = chosen.compile(runlist, layout, mode)
    granule = runlist.device.coherence_granule if runlist.device else 64
    memory = allocate(image, granule=granule, unified=chosen.unified)
    executable = chosen.load(image, memory, device=runlist.device, poison=poison)
    missing = [n for n, *_ in image.inputs if n not in inputs]
    if missing:
        raise KeyError(f"{runlist.name}: missing inputs {missing}")
    specs = _specs(runlist)
    for name, offset, nbytes in image.inputs:
        view(memory["input"].host, offset, nbytes, *specs[name])[...] = inputs[name]
    for name, array in (buffers or {}).items():
        offset, nbytes = layout.scratch[name]
        view(memory["scratch"].host, offset, nbytes, array.dtype, array.shape)[...] = array
        memory["scratch"].sync_to_device(name)
    executable(values or {})
    return {
        name: view(memory["output"].host, o, n, *specs[name]).copy() for name, o, n in image.outputs
    }


def _specs(runlist: Runlist) -> dict[str, tuple]:
    """dtype and shape of each buffer as a step declares it; a buffer only
    ever used through slices is flat, in its slices' dtype."""
    found = {}
    for step in runlist.steps:
        for ref, spec in zip(step.args, step.specs):
            if isinstance(ref, View):
                flat = (runlist.sizes[ref.base] // spec.dtype.itemsize,)
                found.setdefault(ref.base, (spec.dtype, flat))
            else:
                found[ref] = (spec.dtype, spec.shape)
    return found
