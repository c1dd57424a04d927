"""A session: the runtime state that graph functions share, owned in one
place and freed together.

    with Session() as session:
        f = graph(fn, session=session)
        ...

A `Session` owns the backend instances (made by the registered factories,
one per name), the compile cache handle with the source digests that key
it, the simulated device's library (designs and host models by digest and
key) and the host kernels (their modules' imports and the worker threads
they share). Nothing of it lives at module level: `close()` (or dropping
the last reference) frees it all, and a new session starts afresh.

Each graph function has a session of its own unless it is given one:
functions do not see each other's state, and dropping a function frees
everything it compiled. An application with several functions that should
share warm host kernels and one cache handle passes one session to all.
"""

from __future__ import annotations

import threading
from pathlib import Path

from iron.core import registry, settings
from iron.dispatch.cache import CompileCache
from iron.dispatch.host import HostKernels
from iron.dispatch.identity import Sources
from iron.dispatch.sim_xrt import Library
from iron.dispatch.streams import Streams


class SessionClosed(RuntimeError):
    """A closed session was asked for a backend."""


class Session:
    """See the module docstring. `cache` is a `CompileCache`, a root folder,
    or None for ``IRON_CACHE_HOME`` (its default)."""

    def __init__(self, *, cache: CompileCache | Path | str | None = None) -> None:
        self.cache = cache if isinstance(cache, CompileCache) else CompileCache(cache)
        self.sources = Sources()
        self.library = Library(Streams(self.cache))
        self.host = HostKernels()
        self._backends: dict = {}
        self._lock = threading.Lock()
        self.closed = False

    def backend(self, name: str | None = None):
        """This session's instance of backend `name`: a registered name,
        "auto" (the highest-priority one available here), or None for
        ``IRON_BACKEND`` (default "auto")."""
        if name is None:
            name = settings.current().backend
            if name != "auto" and name not in registry.backends():
                raise settings.SettingsError(
                    f"IRON_BACKEND={name!r}: not a registered backend "
                    f"(registered: {', '.join(sorted(registry.backends())) or 'none'}; or auto)"
                )
        return self._instance(self.auto_choice()[0] if name == "auto" else name)

    def auto_choice(self) -> tuple[str, dict[str, str]]:
        """(chosen name, why each better-ranked backend was passed over)."""
        passed_over: dict[str, str] = {}
        for entry in sorted(registry.backends().values(), key=lambda e: -e.priority):
            ok, why = self._instance(entry.name).available()
            if ok:
                return entry.name, passed_over
            passed_over[entry.name] = why
        raise RuntimeError(f"no backend is available here: {passed_over}")

    def _instance(self, name: str):
        with self._lock:
            if self.closed:
                raise SessionClosed(f"this session is closed; backend {name!r} needs an open one")
            if name not in self._backends:
                entry = registry.backend_entry(name)
                instance = entry.load()(self)
                if getattr(instance, "name", None) != name:
                    raise registry.RegistryError(
                        f"backend {name!r} (from plugin {entry.plugin!r}) made an object named "
                        f"{getattr(instance, 'name', None)!r}; a backend's name is its registered name"
                    )
                self._backends[name] = instance
            return self._backends[name]

    def close(self) -> None:
        """Free what the session holds: backends (each closed), host-kernel
        threads, the simulated device's library. Closing twice is a no-op."""
        with self._lock:
            backends, self._backends, self.closed = list(self._backends.values()), {}, True
        for backend in backends:
            backend.close()
        self.host.close()
        self.library.clear()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
