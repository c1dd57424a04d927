"""The simulated NPU: IRON's device runtime (`iron.dispatch.runtime`) over
the simulated XRT device (`iron.dispatch.sim_xrt`). Each step with a design
runs `iron.design.simulate` on the device's bytes at its planned offsets;
a step whose operator has no design falls back to the operator's host model
(its `simulate`, by default its reference), and the version's summary says
how many did. Device memory is apart from the host's; syncs move whole
64-byte granules; per-call values go through a 32-word parameter
scratchpad per program."""

from __future__ import annotations

from iron.dispatch.backends import CompilingBackend
from iron.dispatch.executable import kernel
from iron.dispatch.image import PARAMETER_WORDS
from iron.dispatch.runtime import XrtExecutable
from iron.dispatch.sim_xrt import SimulatedXrt


class SimBackend(CompilingBackend):
    name = "sim"
    max_words = PARAMETER_WORDS
    device_programs = True

    def __init__(self, session) -> None:
        super().__init__(session)
        self.xrt = SimulatedXrt(library=session.library)

    def load(self, image, buffers, *, device=None, poison=False) -> XrtExecutable:
        self.check_mode(image.mode)
        library = self.xrt.library
        library.designs.update(image.designs)
        for program in image.programs:
            for step in program.steps:
                if step.stream:
                    library.operators[step.digest] = image.steps[step.index].op
                    if all(w < 0 for _, w, _ in step.values):  # its values are the image's
                        library.stream(step.digest, {m: c for m, _, c in step.values})
                if step.host is not None and step.host not in library.hosts:
                    library.hosts[step.host] = kernel(
                        image.steps[step.index].op, use_device_model=True
                    )
        return XrtExecutable(image, buffers, self.xrt, poison=poison, device=device)
