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
and keep their state.
"""

from __future__ import annotations

import inspect
import logging
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import numpy as np

from iron.alloc import ArenaPlan
from iron.core import Device, as_dtype, dtype_name, settings
from iron.core.capture import Graph, Value, storage_key
from iron.dispatch.backends import MODES, Backend
from iron.dispatch.executable import allocate
from iron.dispatch.image import design_summary
from iron.dispatch.layout import Layout, arena_layout
from iron.dispatch.memory import Arena, view
from iron.dispatch.runlist import Runlist
from iron.dispatch.selection import get_backend

log = logging.getLogger("iron.dispatch")

PIECE_BYTES = 64 * 2**20
#: weight pieces `GraphFunction.load` copies at once: one per core, up to 4
#: (a few streams fill the memory bus; more only contend)
UPLOAD_THREADS = min(4, os.cpu_count() or 1)


def graph(
    fn=None,
    *,
    name=None,
    backend=None,
    mode="fused",
    device=None,
    poison=None,
    flags=(),
    trace_size=0,
):
    """Make a `GraphFunction` of ``fn(g, *inputs, **per_call_values)``.

    `backend`: a registered backend name or "auto" (default: ``IRON_BACKEND``,
    else "auto"); `mode`: "fused", "separate" or "compare"; `device`: a
    `Device` or name (default ``IRON_DEVICE``, else npu2); `poison`: fill
    transients with NaN before every run (default ``IRON_POISON``, else off);
    `flags`: strings that are part of the compiled image's identity;
    `trace_size`: bytes of a trace buffer the device fills on every call
    (0: none; part of the identity and of aiecc's flags; `Version.trace`)."""

    def wrap(fn):
        return GraphFunction(
            fn, name=name, backend=backend, mode=mode, device=device, poison=poison, flags=flags,
            trace_size=trace_size,
        )  # fmt: skip

    return wrap(fn) if fn is not None else wrap


class Version:
    """One compiled input signature of a graph function: its recording, its
    runlist, its layout in the shared arena (and the layout's report), its
    image and the loaded executable."""

    def __init__(
        self,
        signature,
        graph: Graph,
        runlist: Runlist,
        layout: Layout,
        report: str,
        image,
        executable,
    ):
        self.signature, self.graph, self.runlist, self.layout = signature, graph, runlist, layout
        self.report, self.image, self.executable = report, image, executable
        host_in, host_out = executable.buffers["input"].host, executable.buffers["output"].host
        shapes = {n: (b.shape, b.dtype) for n, b in graph.buffers.items()}
        self._inputs = [
            view(host_in, o, n, shapes[name][1], shapes[name][0]) for name, o, n in image.inputs
        ]
        self._outputs = [
            view(host_out, o, n, shapes[name][1], shapes[name][0]) for name, o, n in image.outputs
        ]

    @property
    def reports(self):
        """Compare mode: the last call's per-step judgements."""
        return self.executable.reports

    @property
    def trace(self) -> bytes:
        """The trace buffer after the last call (empty unless traced); the
        simulated device's records read with `iron.dispatch.sim_xrt.read_trace`."""
        return getattr(self.executable, "trace", b"")

    def __call__(self, arrays, values):
        for target, array in zip(self._inputs, arrays):
            target[...] = array
        self.executable(values)
        outputs = tuple(o.copy() for o in self._outputs)
        return outputs[0] if len(outputs) == 1 else outputs


class GraphFunction:
    def __init__(
        self,
        fn,
        *,
        name=None,
        backend=None,
        mode="fused",
        device=None,
        poison=None,
        flags=(),
        trace_size=0,
    ):
        self.fn, self.name = fn, name or fn.__name__
        self.input_names, self.value_names = _parameters(fn, self.name)
        current = settings.current()
        if device is None:
            try:
                device = Device.from_name(current.device)
            except ValueError as error:
                raise ValueError(f"IRON_DEVICE={current.device!r}: {error}") from error
        elif isinstance(device, str):
            device = Device.from_name(device)
        elif not isinstance(device, Device):
            raise TypeError(
                f"graph {self.name}: device must be a Device or a device name, "
                f"got {type(device).__name__}"
            )
        if mode not in MODES:
            raise ValueError(f"graph {self.name}: mode={mode!r}: one of {', '.join(MODES)}")
        if isinstance(flags, str) or not all(isinstance(f, str) for f in flags):
            raise TypeError(
                f"graph {self.name}: flags must be a sequence of strings, got {flags!r}"
            )
        if poison is not None and not isinstance(poison, bool):
            raise TypeError(
                f"graph {self.name}: poison must be True, False or None, got {poison!r}"
            )
        self.device, self.mode, self.flags = device, mode, tuple(flags)
        self.trace_size = trace_size
        self.poison = current.poison if poison is None else poison
        self.arena = ArenaPlan(alignment=max(64, device.coherence_granule))
        self.versions: dict[tuple, Version] = {}
        self._backend_name = backend
        self._backend: Backend | None = None
        self._memory: Arena | None = None
        self._weights: dict[str, tuple] = {}  # name -> (storage key, array, offset, nbytes)
        self._uploaded_crc: dict[tuple, int] = {}  # poison mode: storage key -> CRC-32 at upload
        self._states: dict[str, tuple] = {}  # name -> (offset, nbytes, dtype, shape)

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = get_backend(self._backend_name)
        return self._backend

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
        return self._version(
            tuple(
                (n, *_shape_dtype(given[n], f"{self.name}.compile: input {n}"))
                for n in self.input_names
            )
        )

    def _version(self, signature) -> Version:
        if signature in self.versions:
            return self.versions[signature]
        # all or nothing: a version that fails anywhere (its memory cannot be
        # allocated, its backend refuses it) must not leave the shared arena
        # grown, or every version that worked would fail to allocate it too
        saved = self._state()
        try:
            return self._compile_version(signature)
        except BaseException:
            self._restore(saved)
            raise

    def _state(self) -> tuple:
        regions = dict(self._memory.buffer.regions) if self._memory is not None else None
        return self.arena.state(), self._memory, regions, dict(self._weights), dict(self._states)

    def _restore(self, saved: tuple) -> None:
        plan, memory, regions, weights, states = saved
        self.arena.restore(plan)
        self._memory, self._weights, self._states = memory, weights, states
        if memory is not None:
            memory.buffer.regions = regions

    def _compile_version(self, signature) -> Version:
        log.info(
            "%s: compiling for %s",
            self.name,
            ", ".join(f"{n} {s} {dtype_name(d)}" for n, s, d in signature),
        )
        g, outputs = self._record(signature)
        runlist = Runlist.from_graph(
            g, inputs=self.input_names, outputs=outputs, device=self.device
        )
        layout, report, _ = arena_layout(runlist, self.arena, self._residents(g))
        log.debug("%s", report)
        backend = self.backend
        # only a traced graph passes trace_size: a backend that cannot trace needs no such keyword
        traced = {"trace_size": self.trace_size} if self.trace_size else {}
        image = backend.compile(runlist, layout, self.mode, self.flags, **traced)
        memory = self._arena_memory(backend)
        buffers = allocate(
            image,
            granule=self.device.coherence_granule,
            unified=backend.unified,
            scratch=memory.buffer,
        )
        executable = backend.load(image, buffers, device=self.device, poison=self.poison)
        self._remember_residents(g, layout)
        version = Version(signature, g, runlist, layout, report, image, executable)
        self.versions[signature] = version
        return version

    def _record(self, signature):
        g = Graph(self.name)
        inputs = [g.input(n, shape, dtype) for n, shape, dtype in signature]
        values = {n: g.scalar(n) for n in self.value_names}
        result = self.fn(g, *inputs, **values)
        returned = result if isinstance(result, (tuple, list)) else (result,)
        names = []
        for value in returned:
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

    def _residents(self, g: Graph) -> dict[str, tuple]:
        residents = {}
        for name, array in g.weights.items():
            key = ("weight", *storage_key(array))
            known = self._weights.get(name)
            if known is not None and known[0] != key:
                raise ValueError(
                    f"{self.name}: weight {name!r} names another array than in an earlier version"
                )
            residents[name] = key
        for name, buffer in g.buffers.items():
            if buffer.role == "state":
                residents[name] = ("state", name)
        return residents

    def _remember_residents(self, g: Graph, layout: Layout) -> None:
        for name, array in g.weights.items():
            if name not in self._weights:
                offset, nbytes = layout.scratch[name]
                self._weights[name] = (("weight", *storage_key(array)), array, offset, nbytes)
        for name, buffer in g.buffers.items():
            if buffer.role == "state" and name not in self._states:
                offset, nbytes = layout.scratch[name]
                self._states[name] = (offset, nbytes, buffer.dtype, buffer.shape)

    def _arena_memory(self, backend: Backend) -> Arena:
        if self._memory is None:
            self._memory = Arena(
                self.arena,
                granule=self.device.coherence_granule,
                unified=backend.unified,
                name=f"{self.name}.arena",
            )
        return self._memory

    # ---- weights and states ----

    def load(self, release=None, piece_bytes: int = PIECE_BYTES, copy=None, threads=None) -> int:
        """Upload every weight not uploaded yet, in pieces of at most
        `piece_bytes`, straight into the arena (no whole-array temporary),
        calling ``release(piece)`` after each piece. Returns bytes uploaded.
        `copy(target, piece)` writes each piece into its arena bytes
        (default `np.copyto`); a checkpoint reader's may read the file
        instead of faulting in its mapping.

        `threads` copies run at once (default `UPLOAD_THREADS`): first
        writes into fresh memory fault its pages in, and on a virtual
        machine that costs more than the copy, so pieces go to several
        threads (`copy` must release the GIL to gain: numpy's copy and
        `os.preadv` do). ``release`` is called from this thread, piece by
        piece in order, and a weight counts as uploaded only once all its
        pieces are: after an error the rest upload on the next call.

        Weights are uploaded once: a weight array changed in place after
        `load` is not seen by later calls until `reload_weights` (in poison
        mode a call refuses to run on it: see `_check_weights`). Then
        every version's executable that has a ``ready()`` is waited for
        (the cpu backend's host kernels import while the weights upload)."""
        if isinstance(piece_bytes, bool) or not isinstance(piece_bytes, (int, np.integer)):
            raise TypeError(f"{self.name}.load: piece_bytes must be an int, got {piece_bytes!r}")
        if piece_bytes < 1:
            raise ValueError(f"{self.name}.load: piece_bytes must be >= 1, got {piece_bytes}")
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, (int, np.integer))
        ):
            raise TypeError(f"{self.name}.load: threads must be an int or None, got {threads!r}")
        if threads is not None and threads < 1:
            raise ValueError(f"{self.name}.load: threads must be >= 1, got {threads}")
        for label, fn in (("release", release), ("copy", copy)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{self.name}.load: {label} must be callable or None")
        copy = copy or np.copyto
        if self._memory is None:
            raise RuntimeError(
                f"{self.name}: nothing compiled yet; call compile() or the function first"
            )
        buffer = self._memory.ensure()
        work = []  # (name, key, nbytes, [(target piece, piece), ...]) per weight to upload
        for name, (key, array, offset, nbytes) in self._weights.items():
            if key in self._memory.loaded:
                continue
            rows = array if array.ndim else array.reshape(1)
            target = view(buffer.host, offset, nbytes, array.dtype, rows.shape)
            step = max(1, piece_bytes // max(1, rows[:1].nbytes))
            pieces = [
                (target[start : start + step], rows[start : start + step])
                for start in range(0, len(rows), step)
            ]
            work.append((name, key, nbytes, pieces))
        uploaded = 0
        with closing(_copied(copy, work, threads or UPLOAD_THREADS)) as copied:
            for (name, key, nbytes, _), piece, last in copied:
                if release is not None and piece is not None:
                    release(piece)
                if last:
                    self._memory.flush(name)
                    self._memory.loaded.add(key)
                    if self.poison:
                        self._uploaded_crc[key] = _crc32(self._weights[name][1])
                    uploaded += nbytes
        for version in self.versions.values():  # what loading the images started
            ready = getattr(version.executable, "ready", None)
            if ready is not None:
                ready()
        return uploaded

    def reload_weights(
        self, *names: str, release=None, piece_bytes: int = PIECE_BYTES, copy=None, threads=None
    ) -> int:
        """Upload weights again (all, or those named): after their arrays
        were changed in place, since `load` uploads each storage once."""
        unknown = [n for n in names if n not in self._weights]
        if unknown:
            raise KeyError(
                f"{self.name} has no weight {', '.join(map(repr, unknown))} "
                f"(weights: {', '.join(self._weights) or 'none'})"
            )
        if self._memory is not None:
            for name in names or self._weights:
                self._memory.loaded.discard(self._weights[name][0])
        return self.load(release=release, piece_bytes=piece_bytes, copy=copy, threads=threads)

    def _check_state(self, name: str) -> tuple:
        if name not in self._states:
            raise KeyError(
                f"{self.name} has no state {name!r} (states: {', '.join(self._states) or 'none'})"
            )
        return self._states[name]

    def read_state(self, name: str) -> np.ndarray:
        offset, nbytes, dtype, shape = self._check_state(name)
        buffer = self._memory.ensure()
        buffer.sync_from_device(name)
        return view(buffer.host, offset, nbytes, dtype, shape).copy()

    def write_state(self, name: str, array) -> None:
        offset, nbytes, dtype, shape = self._check_state(name)
        array = np.asarray(array)
        # no broadcasting and no casting: a state written from the wrong array
        # would silently hold something else than the caller meant
        if array.shape != tuple(shape) or array.dtype != dtype:
            raise ValueError(
                f"{self.name}: state {name!r} is {tuple(shape)} of {dtype_name(dtype)}, "
                f"got {array.shape} of {dtype_name(array.dtype)}"
            )
        buffer = self._memory.ensure()
        view(buffer.host, offset, nbytes, dtype, shape)[...] = array
        self._memory.flush(name)

    def reset_states(self) -> None:
        """Zero every state (a new conversation)."""
        for name, (_, _, dtype, shape) in self._states.items():
            self.write_state(name, np.zeros(shape, dtype))

    # ---- calling ----

    def __call__(self, *arrays, **values):
        if len(arrays) != len(self.input_names):
            raise TypeError(
                f"{self.name} takes {len(self.input_names)} input(s) ({', '.join(self.input_names)}), got {len(arrays)}"
            )
        if set(values) != set(self.value_names):
            missing, extra = (
                set(self.value_names) - set(values),
                set(values) - set(self.value_names),
            )
            raise TypeError(
                f"{self.name}: per-call values missing {sorted(missing)} / unexpected {sorted(extra)}"
            )
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{self.name}: per-call value {key} must be an int, got {value!r}")
        arrays = [np.asarray(a) for a in arrays]
        signature = tuple((n, a.shape, a.dtype) for n, a in zip(self.input_names, arrays))
        version = self.versions.get(signature) or self._version(signature)
        if self.arena.size > self._memory.buffer.nbytes:
            self._memory.ensure()
        if len(self._memory.loaded) < len(self._weights):
            log.warning(
                "%s: uploading weights inside a call; call load() first to keep it out of the latency",
                self.name,
            )
            self.load()
        if self.poison:
            self._check_weights()
        return version(arrays, values)

    def _check_weights(self) -> None:
        """Poison mode: refuse to run on weights changed in place since their
        upload (the device would compute with the old ones), by each one's
        CRC-32 (a pass over the weights per call: a debugging aid)."""
        changed = [
            name
            for name, (key, array, _, _) in self._weights.items()
            if key in self._uploaded_crc and _crc32(array) != self._uploaded_crc[key]
        ]
        if changed:
            names = ", ".join(map(repr, changed))
            raise RuntimeError(
                f"{self.name}: weight(s) {names} changed in place after load(), so the device "
                f"holds the old values; call {self.name}.reload_weights({names}) to upload them"
            )

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
        return "\n".join(lines)


def _crc32(array: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def _parameters(fn, name: str) -> tuple[list[str], list[str]]:
    parameters = list(inspect.signature(fn).parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not parameters or parameters[0].kind not in positional:
        raise TypeError(f"graph function {name} must take the builder `g` as its first parameter")
    inputs, values = [], []
    for p in parameters[1:]:
        if p.kind in positional:
            inputs.append(p.name)
        elif p.kind is inspect.Parameter.KEYWORD_ONLY:
            values.append(p.name)
        else:
            raise TypeError(f"graph function {name}: *args and **kwargs are not supported ({p})")
    return inputs, values


def _shape_dtype(spec, where: str) -> tuple[tuple[int, ...], np.dtype]:
    if hasattr(spec, "shape") and hasattr(spec, "dtype"):
        return tuple(spec.shape), as_dtype(spec.dtype)
    rule = "a (shape, dtype) pair or anything with .shape and .dtype"
    if not isinstance(spec, (tuple, list)) or len(spec) != 2:
        raise TypeError(f"{where}: {rule}, got {spec!r}")
    shape, dtype = spec
    shape = (shape,) if isinstance(shape, (int, np.integer)) else shape
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise TypeError(f"{where}: a shape of non-negative ints, got {spec[0]!r}")
    try:
        return tuple(int(d) for d in shape), as_dtype(dtype)
    except TypeError as error:
        raise TypeError(f"{where}: {error}") from None


def _copied(copy, work, threads):
    """Each piece of `work` (weights as (name, key, nbytes, [(target, piece)]))
    once `copy(target, piece)` is done, in order, as (weight, piece, whether
    it is the weight's last; a weight with no pieces comes once with None).
    The copies run on `threads` threads; closing this stops those not begun."""
    if threads == 1:
        for weight in work:
            yield from _in_order(weight, (copy(target, piece) for target, piece in weight[3]))
        return
    pool = ThreadPoolExecutor(threads, thread_name_prefix="iron-upload")
    try:
        futures = [[pool.submit(copy, *pair) for pair in weight[3]] for weight in work]
        for weight, pending in zip(work, futures):
            yield from _in_order(weight, (future.result() for future in pending))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _in_order(weight, results):
    pieces = weight[3]
    if not pieces:
        yield weight, None, True
    for k, ((_, piece), _) in enumerate(zip(pieces, results)):
        yield weight, piece, k == len(pieces) - 1
