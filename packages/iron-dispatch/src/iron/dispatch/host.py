"""Host kernels for one session: their modules' imports and the worker
threads their kernels share, so a session that closes frees both.

An operator names its host kernel by an import path, ``host =
"iron.ops.gemm.host:gemv"`` (see the cpu backend). `HostKernels` imports
each kernel module once per session, in a thread of its own (a JIT's
import and compile, seconds for numba, overlap building the images and
uploading the weights), calls the module's ``warm_up()`` if it has one,
and hands a kernel that takes a keyword-only ``pool`` parameter the
session's `HostPool` (bound by name, as a shape rule's parameters are).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

log = logging.getLogger("iron.dispatch")

#: idle OpenMP workers sleep at once instead of spinning: on a shared host a
#: spinning worker is descheduled and each parallel launch then waits a
#: scheduler quantum for it (47 ms median per launch measured on a busy
#: 2-core host, 16 us passive). The OpenMP runtime reads it when a JIT
#: first starts its threads, so it is set (unless the user set it) before
#: the first kernel module is imported, never at import time.
OPENMP_ENVIRONMENT = (("OMP_WAIT_POLICY", "passive"),)
#: seconds between two looks at what a kernel module being waited for is doing
STATUS_EVERY = 0.2


class HostPool:
    """Worker threads the session's host kernels share: created on first
    use, shut down when the session closes. `local` keeps per-thread
    scratch a kernel reuses between calls (dropped with the pool)."""

    def __init__(self, workers: int | None = None, name: str = "iron-host") -> None:
        self.workers = workers or os.cpu_count() or 1
        self.name = name
        self.local = threading.local()
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable, /, *args) -> Future:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix=self.name)
            return self._executor.submit(fn, *args)

    @property
    def started(self) -> bool:
        return self._executor is not None

    def close(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
            self.local = threading.local()
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


class HostKernels:
    """One session's host-kernel modules (imported once each, in a thread)
    and its `pool`."""

    def __init__(self) -> None:
        self.pool = HostPool()
        self._modules: dict[str, Future] = {}
        self._kernels: dict[str, Callable | None] = {}
        #: module -> what its import thread is doing (for `wait`'s status)
        self._doing: dict[str, str] = {}
        self._lock = threading.Lock()

    def start(self, target: str) -> None:
        """Start importing (and warming up) the module of `target`
        (``module:name``) unless it is under way."""
        self._module(target.partition(":")[0])

    def wait(self, target: str, status: Callable[[str], object] | None = None) -> None:
        """Wait for the import (and warm-up) of `target`'s module, calling
        ``status(text)`` with what it is doing every `STATUS_EVERY` seconds
        until it is done; an import that failed is left to `kernel`."""
        module = target.partition(":")[0]
        future = self._module(module)
        while status is not None and not future.done():
            status(self._doing.get(module, f"importing {module}"))
            try:
                future.exception(timeout=STATUS_EVERY)
            except FutureTimeout:
                continue

    def kernel(self, target: str) -> Callable | None:
        """The kernel `target` names, waiting for its module's import; None
        (logged once) where it cannot be imported: the reference runs."""
        with self._lock:
            if target in self._kernels:
                return self._kernels[target]
        module, _, name = target.partition(":")
        try:
            fn = getattr(self._module(module).result(), name)
        except (ImportError, AttributeError) as error:
            log.warning("host kernel %s cannot be imported (%s); running references", target, error)
            fn = None
        if fn is not None and "pool" in _keyword_only(fn):
            fn = functools.partial(fn, pool=self.pool)
        with self._lock:
            return self._kernels.setdefault(target, fn)

    def _module(self, module: str) -> Future:
        with self._lock:
            if module not in self._modules:
                for name, value in OPENMP_ENVIRONMENT:
                    os.environ.setdefault(name, value)
                future = self._modules[module] = Future()
                # not a daemon: exiting mid-import could stop a JIT inside native code
                threading.Thread(
                    target=self._import, args=(module, future), name=f"import {module}"
                ).start()
            return self._modules[module]

    def _import(self, module: str, future: Future) -> None:
        def doing(text: str) -> None:
            self._doing[module] = text

        try:
            doing(f"importing {module}")
            loaded = importlib.import_module(module)
            warm_up = getattr(loaded, "warm_up", None)
            if callable(warm_up):
                report = warm_up(doing) if _takes_status(warm_up) else warm_up()
                log.info("host kernels of %s ready%s", module, _described(report))
        except BaseException as error:  # raised again in the thread that waits for it
            future.set_exception(error)
        else:
            future.set_result(loaded)
        finally:
            self._doing.pop(module, None)

    def close(self) -> None:
        self.pool.close()
        with self._lock:
            self._kernels.clear()
            self._modules.clear()


#: what `warm_elsewhere`'s process runs: each module's warm-up, in order
_WARM = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m).warm_up()"


def warm_elsewhere(modules) -> subprocess.Popen | None:
    """Start a process that imports each of `modules` and runs its
    ``warm_up()``: a JIT that caches what it compiles on disk (numba's, in
    the user cache) then compiles there, on another core, while this
    process does something else; a later import here loads what it wrote.
    None when there is nothing to warm. Its output is discarded; it ends
    by itself (`wait` on the result to be sure it has)."""
    modules = sorted(set(modules))
    if not modules:
        return None
    env = dict(os.environ)
    for name, value in OPENMP_ENVIRONMENT:
        env.setdefault(name, value)
    return subprocess.Popen(
        [sys.executable, "-c", _WARM, *modules],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip


def _keyword_only(fn: Callable) -> set[str]:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature takes no pool
        return set()
    return {p.name for p in parameters if p.kind is p.KEYWORD_ONLY}


def _takes_status(fn: Callable) -> bool:
    try:
        return len(inspect.signature(fn).parameters) > 0
    except (TypeError, ValueError):
        return False


def _described(info) -> str:
    """What a kernel module's `warm_up` said, as a log reads: `in 0.83 s
    (compiled 0, threads 2)`, never a raw dict."""
    if not isinstance(info, dict):
        return "" if info is None else f": {info}"
    rest = dict(info)
    seconds = rest.pop("seconds", None)
    took = f" in {seconds:.2f} s" if isinstance(seconds, (int, float)) else ""
    details = ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in rest.items())
    return took + (f" ({details})" if details else "")
