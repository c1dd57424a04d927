"""The simulated NPU: IRON's device runtime (`iron.dispatch.runtime`) over
the simulated XRT device (`iron.dispatch.sim_xrt`). Each step with a design
runs `iron.design.simulate` on the device's bytes at its planned offsets;
a step whose operator has no design falls back to the operator's host model
(its `simulate`, by default its reference), and the version's summary says
how many did. Device memory is apart from the host's; syncs move whole
64-byte granules. A fused image is a full ELF whose per-call values go
through a 32-word parameter scratchpad; a separate or compare image is an
xclbin whose steps run instruction streams made for each call's values,
the per-call words its cores read written into runtime-parameter buffers."""

from __future__ import annotations

from pathlib import Path

from iron.dispatch.backends import CompilingBackend
from iron.dispatch.cache import read_json
from iron.dispatch.executable import kernel
from iron.dispatch.image import PARAMETER_WORDS
from iron.dispatch.packaging import rtp_params
from iron.dispatch.pipeline import program_kernel
from iron.dispatch.program import step_design
from iron.dispatch.runtime import XclbinExecutable, XrtExecutable
from iron.dispatch.sim_xrt import SimulatedXrt, stream
from iron.dispatch.streams import stream_key
from iron.dispatch.values import step_values


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
                op = image.steps[step.index].op
                if step.device is not None and step.digest not in library.designs:
                    # a cache hit builds no design; the device needs it to run
                    library.designs[step.digest] = step_design(op, program.name)
                if step.stream:
                    library.operators[step.digest] = op
                    if all(w < 0 for _, w, _ in step.values):  # its values are the image's
                        # in the form the image's device runs it (an xclbin's: RTP words)
                        rtp = frozenset()
                        if image.mode != "fused":
                            rtp = rtp_params(library.designs[step.digest], step)
                        library.stream(step.digest, step_values(step.values, ()), rtp)
                if step.host is not None and step.host not in library.hosts:
                    library.hosts[step.host] = kernel(op, use_device_model=True)
        if image.mode == "fused":
            return XrtExecutable(image, buffers, self.xrt, poison=poison, device=device)
        record = read_json(Path(image.xclbin))  # the kernels' names and the uuid
        programs = image.programs

        def streams(index: int, params: dict, values: dict):
            program = programs[index]
            kernel = program_kernel(program)
            # a stream is its program's (the step's views), so per entry and step
            key = (image.xclbin, index, stream_key(program.steps[0], params, values))
            return library.streams.instructions(
                key, lambda: stream(record["uuid"], kernel, program, params, values)
            )

        return XclbinExecutable(
            image, buffers, self.xrt, streams=streams, poison=poison, device=device
        )
