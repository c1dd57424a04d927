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
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger("iron.dispatch")

#: idle OpenMP workers sleep at once instead of spinning: on a shared host a
#: spinning worker is descheduled and each parallel launch then waits a
#: scheduler quantum for it (47 ms median per launch measured on a busy
#: 2-core host, 16 us passive). The OpenMP runtime reads it when a JIT
#: first starts its threads, so it is set (unless the user set it) before
#: the first kernel module is imported, never at import time.
OPENMP_ENVIRONMENT = (("OMP_WAIT_POLICY", "passive"),)


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
        self._lock = threading.Lock()

    def start(self, target: str) -> None:
        """Start importing (and warming up) the module of `target`
        (``module:name``) unless it is under way."""
        self._module(target.partition(":")[0])

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
                    target=_import, args=(module, future), name=f"import {module}"
                ).start()
            return self._modules[module]

    def close(self) -> None:
        self.pool.close()
        with self._lock:
            self._kernels.clear()
            self._modules.clear()


def _keyword_only(fn: Callable) -> set[str]:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature takes no pool
        return set()
    return {p.name for p in parameters if p.kind is p.KEYWORD_ONLY}


def _import(module: str, future: Future) -> None:
    try:
        loaded = importlib.import_module(module)
        if callable(getattr(loaded, "warm_up", None)):
            log.info("host kernels of %s ready%s", module, _described(loaded.warm_up()))
    except BaseException as error:  # raised again in the thread that waits for it
        future.set_exception(error)
    else:
        future.set_result(loaded)


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
