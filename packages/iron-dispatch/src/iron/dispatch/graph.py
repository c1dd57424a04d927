"""Graph functions: one recording per input signature, every version in one
arena.

    @iron.dispatch.graph(backend="sim")
    def block(g, x, *, pos):
        h = g(RMSNorm(size=x.size, tile_size=64, weighted=True), x, g.weight("norm", w))
        ...
        return y

    block.compile(x=((1, 64), bf16))   # ahead of time, or just call it
    block.load(release=checkpoint.release)
    y = block(x, pos=3)

Positional parameters after the builder are inputs; keyword-only parameters
are per-call integers that reach operators' per-call members through the
bindings recorded with ``g(op, ..., member=expression)``. Weights (arrays
given to ``g.weight``) and states (``g.state``) are residents of the shared
`iron.alloc.ArenaPlan`: one offset in every version, uploaded once per
storage; everything else is a transient that may reuse other versions'
bytes. A version compiled later may grow the arena; earlier ones rebind
and keep their state. The weights and states are `Residents`
(`iron.dispatch.residents`); the runtime state behind a function (backend
instances, compile cache handle, host kernels) is its `Session`.

Calls are safe from any number of threads: one lock per function is held
around a call (and around compiling, loading and state I/O). A device runs
one call at a time anyway (one hardware context), a state such as a KV
cache makes calls depend on their order, and per-thread transients would
multiply the arena by the thread count for no gain in throughput.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from iron.alloc import ArenaPlan
from iron.core import dtype_name, settings
from iron.core.capture import Graph, Value
from iron.dispatch.arguments import (
    check_call,
    check_load,
    check_options,
    device_of,
    parameters,
    shape_dtype,
)
from iron.dispatch.backends import Backend
from iron.dispatch.executable import allocate
from iron.dispatch.image import design_summary
from iron.dispatch.layout import Layout, arena_layout
from iron.dispatch.memory import view
from iron.dispatch.packaging import Plan, lowering, plan
from iron.dispatch.program import step_design
from iron.dispatch.residents import PIECE_BYTES, Residents
from iron.dispatch.runlist import Runlist
from iron.dispatch.session import Session

log = logging.getLogger("iron.dispatch")


def graph(fn=None, *, name=None, backend=None, mode="auto", device=None, poison=None, flags=(),
          trace_size=0, session=None, image=None):  # fmt: skip
    """Make a `GraphFunction` of ``fn(g, *inputs, **per_call_values)``.

    `backend`: a registered backend name or "auto" (default: ``IRON_BACKEND``,
    else "auto"); `mode`: "auto" (the packaging plan's dispatch: a fused full
    ELF, or step by step on an xclbin; `iron.dispatch.packaging`), "fused",
    "separate" or "compare"; `image`: None (by the plan's rules), "elf" or
    "xclbin", a force a rule may refuse; `device`: a
    `Device` or name (default ``IRON_DEVICE``, else npu2); `poison`: fill
    transients with NaN before every run (default ``IRON_POISON``, else off);
    `flags`: strings that are part of the compiled image's identity;
    `trace_size`: bytes of a trace buffer the device fills on every call
    (0: none; part of the identity and of aiecc's flags; `Version.trace`);
    `session`: the `Session` to compile and run in (default: one of the
    function's own, closed with it)."""

    def wrap(fn):
        options = dict(name=name, backend=backend, mode=mode, device=device, poison=poison)
        return GraphFunction(
            fn, **options, flags=flags, trace_size=trace_size, session=session, image=image
        )

    return wrap(fn) if fn is not None else wrap


class Version:
    """One compiled input signature of a graph function: its recording, its
    runlist, its layout in the shared arena (and the layout's report), its
    image and the loaded executable. Calling it takes its function's lock."""

    def __init__(self, signature, graph: Graph, runlist: Runlist, layout: Layout, report: str,
                 image, executable, lock, plan: Plan) -> None:  # fmt: skip
        self.signature, self.graph, self.runlist, self.layout = signature, graph, runlist, layout
        self.report, self.image, self.executable = report, image, executable
        self.plan = plan  # its packaging plan
        self._lock = lock
        shapes = {n: (b.shape, b.dtype) for n, b in graph.buffers.items()}

        def views(arena, table):
            host = executable.buffers[arena].host
            return [view(host, o, n, shapes[name][1], shapes[name][0]) for name, o, n in table]

        self._inputs, self._outputs = views("input", image.inputs), views("output", image.outputs)

    def packaging(self) -> str:
        """The packaging plan's report: the image, why, and how each
        per-call value reaches the device (`iron.dispatch.packaging`)."""
        lowered = lowering(self.plan, self.runlist, lambda op: step_design(op, self.runlist.name))
        return self.plan.report(self.runlist.name, map(str, lowered))

    @property
    def reports(self):
        """Compare mode: the last call's per-step judgements."""
        return self.executable.reports

    @property
    def trace(self) -> bytes:
        """The trace buffer after the last call (empty unless traced); the
        simulated device's records read with `iron.dispatch.sim_xrt.read_trace`,
        or as Chrome trace-event JSON with `iron.dispatch.pictures.chrome_trace`."""
        return getattr(self.executable, "trace", b"")

    def __call__(self, arrays, values):
        with self._lock:
            for target, array in zip(self._inputs, arrays):
                target[...] = array
            self.executable(values)
            outputs = tuple(o.copy() for o in self._outputs)
        return outputs[0] if len(outputs) == 1 else outputs


class GraphFunction:
    def __init__(self, fn, *, name=None, backend=None, mode="auto", device=None, poison=None,
                 flags=(), trace_size=0, session=None, image=None) -> None:  # fmt: skip
        self.fn, self.name = fn, name or fn.__name__
        self.input_names, self.value_names = parameters(fn, self.name)
        current = settings.current()
        device = device_of(device, current.device, self.name)
        check_options(self.name, mode, flags, poison, session, image)
        self.device, self.mode, self.flags, self.image = device, mode, tuple(flags), image
        self.trace_size = trace_size
        self.poison = current.poison if poison is None else poison
        self.arena = ArenaPlan(alignment=max(64, device.coherence_granule))
        self.residents = Residents(
            self.name, self.arena, granule=device.coherence_granule, poison=self.poison
        )
        self.versions: dict[tuple, Version] = {}
        self.session = session or Session()
        self._owns_session = session is None
        self._backend_name = backend
        self._lock = threading.RLock()

    @property
    def backend(self) -> Backend:
        return self.session.backend(self._backend_name)

    def close(self) -> None:
        """Drop every version; close the session if it is the function's own."""
        with self._lock:
            self.versions.clear()
            if self._owns_session:
                self.session.close()

    # ---- compiling ----

    def compile(self, *specs, **named) -> Version:
        """Compile the version for input specs given as ``(shape, dtype)`` or
        anything with ``.shape`` and ``.dtype``, by position or by name."""
        if len(specs) + len(named) != len(self.input_names):
            raise TypeError(
                f"{self.name} takes {len(self.input_names)} input(s) ({', '.join(self.input_names)})"
            )
        given = dict(zip(self.input_names, specs))
        for key, spec in named.items():
            if key not in self.input_names or key in given:
                raise TypeError(f"{self.name}: unexpected or repeated input {key!r}")
            given[key] = spec
        where = f"{self.name}.compile: input"
        signature = tuple((n, *shape_dtype(given[n], f"{where} {n}")) for n in self.input_names)
        with self._lock:
            return self._version(signature)

    def _version(self, signature) -> Version:
        if signature in self.versions:
            return self.versions[signature]
        # all or nothing: a version that fails anywhere (its memory cannot be
        # allocated, its backend refuses it) must not leave the shared arena
        # grown, or every version that worked would fail to allocate it too
        saved = self.residents.snapshot()
        try:
            return self._compile_version(signature)
        except BaseException:
            self.residents.restore(saved)
            raise

    def _compile_version(self, signature) -> Version:
        shown = ", ".join(f"{n} {s} {dtype_name(d)}" for n, s, d in signature)
        log.info("%s: compiling for %s", self.name, shown)
        g, outputs = self._record(signature)
        runlist = Runlist.from_graph(
            g, inputs=self.input_names, outputs=outputs, device=self.device
        )
        layout, report, _ = arena_layout(runlist, self.arena, self.residents.keys(g))
        log.debug("%s", report)
        backend = self.backend
        packaged = self._plan(runlist, backend)
        # only a traced graph passes trace_size: a backend that cannot trace needs no such keyword
        traced = {"trace_size": self.trace_size} if self.trace_size else {}
        image = backend.compile(runlist, layout, packaged.dispatch, self.flags, **traced)
        memory = self.residents.ensure_memory(backend.unified)
        buffers = allocate(image, granule=self.device.coherence_granule,
                           unified=backend.unified, scratch=memory.buffer)  # fmt: skip
        executable = backend.load(image, buffers, device=self.device, poison=self.poison)
        self.residents.remember(g, layout)
        version = Version(
            signature, g, runlist, layout, report, image, executable, self._lock, packaged
        )
        self.versions[signature] = version
        return version

    def _plan(self, runlist: Runlist, backend) -> Plan:
        """The packaging plan (`iron.dispatch.packaging`) on a backend with
        device programs; a host backend builds no device image, so "auto"
        runs it fused, and its plan says so."""
        if getattr(backend, "device_programs", False):
            return plan(self.device, runlist, image=self.image, dispatch=self.mode)
        dispatch = "fused" if self.mode == "auto" else self.mode
        return Plan("host", dispatch, (f"backend {backend.name} runs every step on the host",))

    def _record(self, signature):
        g = Graph(self.name)
        inputs = [g.input(n, shape, dtype) for n, shape, dtype in signature]
        result = self.fn(g, *inputs, **{n: g.scalar(n) for n in self.value_names})
        names = []
        for value in result if isinstance(result, (tuple, list)) else (result,):
            if not isinstance(value, Value) or value.graph is not g:
                raise TypeError(
                    f"{self.name} must return values recorded with its builder, got {value!r}"
                )
            if value.role != "intermediate":
                raise TypeError(
                    f"{self.name} returns {value.name}, a {value.role}; return values computed by steps"
                )
            if value.name in names:
                raise TypeError(f"{self.name} returns {value.name} twice")
            names.append(value.name)
        return g, names

    # ---- weights and states (`Residents`) ----

    def load(self, release=None, piece_bytes: int = PIECE_BYTES, copy=None, threads=None,
             in_place=None, wait: bool = True) -> int:  # fmt: skip
        """Upload every weight not uploaded yet, in pieces of at most
        `piece_bytes`, calling ``release(piece)`` after each; a weight for
        which `in_place(array)` is true is read where it lies where the
        backend's memory is the host's (see `Residents.load`). Returns the
        bytes uploaded or held in place. Then, with `wait`, what loading the
        images started is waited for (`ready`)."""
        check_load(self.name, release, piece_bytes, copy, threads, in_place)
        with self._lock:
            uploaded = self.residents.load(release, piece_bytes, copy, threads, in_place)
            if wait:
                self._ready(None)
            return uploaded

    def held_in_place(self) -> list[str]:
        """The weights read where they lie (`load`'s `in_place`), by name."""
        with self._lock:
            return self.residents.held_in_place()

    def ready(self, status=None) -> None:
        """Wait for what loading the images started (the cpu backend's host
        kernels import and compile, or load compiled, while the weights
        upload); `status(text)` is called with what is being waited for
        while it lasts."""
        with self._lock:
            self._ready(status)

    def _ready(self, status) -> None:
        for version in self.versions.values():
            ready = getattr(version.executable, "ready", None)
            if ready is not None:
                ready(status)

    def reload_weights(self, *names: str, release=None, piece_bytes: int = PIECE_BYTES,
                       copy=None, threads=None) -> int:  # fmt: skip
        """Upload weights again (all, or those named): after their arrays
        were changed in place, since `load` uploads each storage once. A
        weight reshaped or retyped in place is refused, and nothing changes."""
        check_load(self.name, release, piece_bytes, copy, threads)
        with self._lock:
            self.residents.forget_uploads(names)
            return self.load(release=release, piece_bytes=piece_bytes, copy=copy, threads=threads)

    def read_state(self, name: str) -> np.ndarray:
        with self._lock:
            return self.residents.read_state(name)

    def write_state(self, name: str, array) -> None:
        with self._lock:
            self.residents.write_state(name, array)

    def reset_states(self) -> None:
        """Zero every state (a new conversation)."""
        with self._lock:
            self.residents.reset_states()

    # ---- calling ----

    def __call__(self, *arrays, **values):
        check_call(self.name, self.input_names, self.value_names, arrays, values)
        arrays = [np.asarray(a) for a in arrays]
        signature = tuple((n, a.shape, a.dtype) for n, a in zip(self.input_names, arrays))
        with self._lock:
            version = self.versions.get(signature) or self._version(signature)
            self.residents.memory.ensure()
            if not self.residents.all_loaded():
                log.warning(
                    "%s: uploading weights inside a call; call load() first to keep it out of the latency",
                    self.name,
                )
                self.load()
            if self.poison:
                self.residents.check_weights()
            return version(arrays, values)

    def plan_svg(self, path=None, **options) -> str:
        """The arena as an SVG picture: every version's steps end to end,
        weights, states and transients coloured (`iron.dispatch.pictures`)."""
        from iron.dispatch.pictures import plan_svg

        with self._lock:
            return plan_svg(self, path, **options)

    def design_summary(self) -> str:
        """Over every version: how many steps run designs on the device and
        which operators fall back to host models (a host backend: none)."""
        images = [v.image for v in self.versions.values() if v.image.programs]
        if not images:
            return f"backend {self.backend.name} runs no device programs: every step on the host"
        return design_summary(images)

    def summary(self) -> str:
        lines = [
            f"{self.name}: {len(self.versions)} version(s), arena {self.arena.size} B, backend {self.backend.name}"
        ]
        for signature, version in self.versions.items():
            designs = f"; {version.image.design_summary()}" if version.image.programs else ""
            lines.append(
                f"  {signature}: {len(version.runlist.steps)} steps; {version.report}{designs}"
            )
            lines += ["    " + line for line in version.packaging().splitlines()]
        return "\n".join(lines)
