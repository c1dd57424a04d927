"""Backends: how a runlist becomes an image and how an image runs.

`Backend` is the protocol a backend follows and what the
`iron_register_backends` hook registers (by a factory: a class or function
called with the `iron.dispatch.Session` that owns the instance). IRON's own
backends are `reference`, `cpu`, `sim` and `npu` (one module each here);
they share `CompilingBackend`, which compiles through the session's compile
cache. A third-party backend may use it too, or implement the protocol from
scratch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs

from iron.core import Device
from iron.dispatch.cache import CompileCache
from iron.dispatch.executable import StepReport
from iron.dispatch.identity import digest, key_text
from iron.dispatch.image import Image, build
from iron.dispatch.layout import Layout
from iron.dispatch.memory import DeviceBuffer
from iron.dispatch.packaging import record as packaging_record
from iron.dispatch.pipeline import loadable, read_programs, write_artifacts
from iron.dispatch.runlist import Runlist

log = logging.getLogger("iron.dispatch")

#: the dispatch modes: one program over the whole runlist; one dispatch per
#: step; one dispatch per step, each judged against the operator's reference
MODES = ("fused", "separate", "compare")


class BackendUnavailable(RuntimeError):
    """The chosen backend cannot run on this host."""


@runtime_checkable
class Executable(Protocol):
    """One loaded image. Before a call the caller writes the inputs into
    ``buffers["input"].host``; after it, it reads the outputs from
    ``buffers["output"].host``. In between the executable moves bytes
    between host and device as its dispatch mode does, runs every step, and
    (compare mode) leaves one `StepReport` per output of each step in
    `reports`. It may also have ``ready()``, blocking until it can run
    without loading anything more: `GraphFunction.load` calls it after the
    weights' upload, which the loading can overlap."""

    buffers: dict[str, DeviceBuffer]
    reports: list[StepReport]

    def __call__(self, values: Mapping[str, int]) -> None:
        """Run once with the per-call values (scalar name -> int)."""


@runtime_checkable
class Backend(Protocol):
    """What a backend is. `name` is its registered name; `unified` says
    whether host and device share one set of bytes (the caller allocates
    the buffers `load` takes with it, `iron.dispatch.executable.allocate`);
    `modes` are the dispatch modes of `MODES` it runs. An instance belongs
    to one session, which closes it."""

    name: str
    unified: bool
    modes: tuple[str, ...]

    def available(self) -> tuple[bool, str]:
        """(ok, why): whether it can run on this host and, if not, what is
        missing and how to get it. Never raises; cheap enough for `iron
        doctor` and for ``auto`` to ask every backend."""

    def compile(self, runlist: Runlist, layout: Layout, mode: str = "fused", flags=()) -> Image:
        """The image of `runlist` laid out by `layout`, in dispatch `mode`;
        `flags` (strings) are part of its identity. A graph function with a
        trace buffer also passes ``trace_size=`` (bytes); a backend that
        cannot trace may leave the keyword out and is never passed it
        otherwise. Raises
        `ValueError` naming the backend and its modes for a mode it does
        not run (compare included: no silent plain run), `BackendUnavailable`
        when it cannot run here, `CompileError` when the runlist cannot be
        its image."""

    def load(
        self,
        image: Image,
        buffers: dict[str, DeviceBuffer],
        *,
        device: Device | None = None,
        poison: bool = False,
    ) -> Executable:
        """An executable of `image` over `buffers` (arena name -> buffer, for
        "input", "output" and "scratch"). `device` is what compare mode
        judges tolerances for; `poison` fills transients and outputs with NaN
        bytes before every run."""

    def close(self) -> None:
        """Release what the instance holds (device handles, loaded code); its
        session calls it once, on closing, and uses the instance no more."""


class CompilingBackend:
    """What IRON's backends share: `compile` checks the mode and
    availability, builds the image in memory (`iron.dispatch.image.build`)
    and goes through the compile cache for its artifacts
    (`iron.dispatch.pipeline`): a hit costs a hash and a read, a miss writes
    them. Subclasses set `name`, `unified`, `modes`, `max_words` (the
    parameter scratchpad's words, None for no limit), `device_programs`
    (plan device programs from designs) and define `load`, and `toolchain()`
    where aiecc compiles the programs; `hits` and `misses` count cache
    lookups. Made with the session that owns it: its compile cache and its
    source digests key every image."""

    name = "backend"
    unified = False
    modes: tuple[str, ...] = MODES
    max_words: int | None = None
    device_programs = False

    def __init__(self, session) -> None:
        self.cache: CompileCache = session.cache
        self.sources = session.sources
        self.hits = self.misses = 0

    def available(self) -> tuple[bool, str]:
        return True, "always"

    def close(self) -> None:
        """Nothing held beyond the session's own resources."""

    def check_mode(self, mode: str) -> None:
        if mode not in self.modes:
            raise ValueError(
                f"backend {self.name!r} has no mode {mode!r} (modes: {', '.join(self.modes)})"
            )

    def words_limit(self, mode: str) -> int | None:
        """Distinct per-call values an image in `mode` may hold: separate
        and compare run one program per step, each with a scratchpad of its
        own, so only a fused image holds every word in one."""
        return self.max_words if mode == "fused" else None

    def toolchain(self):
        """The aiecc and Peano install that compiles programs to ELFs; None
        where this backend loads programs without them."""
        return None

    def compile(
        self,
        runlist: Runlist,
        layout: Layout,
        mode: str = "fused",
        flags=(),
        *,
        trace_size: int = 0,
    ) -> Image:
        self.check_mode(mode)
        ok, why = self.available()
        if not ok:
            raise BackendUnavailable(f"backend {self.name!r} is not available here: {why}")
        toolchain = self.toolchain()
        parts = {
            "backend": self.name,
            "mode": mode,
            "flags": sorted(flags),
            "trace_size": trace_size,
            "device": runlist.device.key if runlist.device else None,
            "toolchain": toolchain,
        }
        key = digest(key_text(runlist, layout, parts, self.sources))
        cache = self.cache
        started = time.perf_counter()
        # the steps alone first: a hit reads its programs from the entry and
        # builds no design and no program (a 16-layer graph's designs and
        # fused program cost more than the whole lookup)
        image = self.build(runlist, layout, mode, flags, trace_size, programs=False)
        found: dict[str, object] = {}

        def accept(entry: Path) -> bool:
            found["programs"] = read_programs(entry, image) if self.device_programs else ()
            return found["programs"] is not None

        def write(staging: Path) -> dict:
            found["image"] = built = self.build(runlist, layout, mode, flags, trace_size)
            fields = write_artifacts(built, staging, toolchain=toolchain, cache=cache)
            if self.device_programs:
                fields["packaging"] = packaging_record(runlist, mode, built.design_of)
            return fields

        entry, hit = cache.get_or_build(
            key, write, accept=accept, backend=self.name, mode=mode, name=runlist.name
        )
        self.hits += hit
        self.misses += not hit
        image = attrs.evolve(image, programs=found["programs"]) if hit else found["image"]
        log.debug(
            "%s: %s image %s (%.1f ms)",
            runlist.name,
            "cached" if hit else "compiled",
            key[:12],
            1e3 * (time.perf_counter() - started),
        )
        if not image.programs:
            return image
        return attrs.evolve(image, **loadable(entry, image, elf=toolchain is not None))

    def build(
        self,
        runlist: Runlist,
        layout: Layout,
        mode: str,
        flags,
        trace_size: int = 0,
        *,
        programs: bool = True,
    ) -> Image:
        """The image in memory; with `programs` (and `device_programs`) its
        designs and device programs too."""
        return build(
            runlist,
            layout,
            backend=self.name,
            mode=mode,
            flags=flags,
            max_words=self.words_limit(mode),
            trace_size=trace_size,
            programs=programs and self.device_programs,
        )
