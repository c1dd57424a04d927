from iron.dispatch.executable import FusedExecutable
from iron.dispatch.image import build


class CountingExecutable(FusedExecutable):
    """IRON's host executable, counting on its backend the steps it runs."""

    def __init__(self, backend, image, buffers, *, poison):
        super().__init__(image, buffers, device_model=False, poison=poison)
        self.backend = backend

    def run(self, steps, words):
        for step in steps:
            step(words)
            self.backend.steps_run += 1


class CountingBackend:
    """Each step's numpy reference on the host, one at a time, counted."""

    name = "counting"
    unified = True  # host and device share one set of bytes: syncs are free
    modes = ("fused",)

    def __init__(self, session):  # the session owning it (nothing of it is needed here)
        self.steps_run = 0

    def available(self):
        return True, "runs wherever numpy does"

    def close(self):
        pass  # holds nothing beyond its counter

    def compile(self, runlist, layout, mode="fused", flags=()):
        if mode not in self.modes:
            raise ValueError(f"backend {self.name!r} has no mode {mode!r} (modes: fused)")
        return build(runlist, layout, backend=self.name, mode=mode, flags=flags)

    def load(self, image, buffers, *, device=None, poison=False):
        return CountingExecutable(self, image, buffers, poison=poison)
