"""Choosing a backend: by name, by ``IRON_BACKEND``, or ``auto`` (the
highest-priority registered backend that is available here)."""

from __future__ import annotations

import os

from iron.core import registry
from iron.dispatch.backends import Backend

_instances: dict[str, Backend] = {}


def backend_names() -> list[str]:
    return sorted(registry.backends())


def get_backend(name: str | None = None) -> Backend:
    """The backend `name`; None means ``$IRON_BACKEND``, else ``auto``."""
    name = name or os.environ.get("IRON_BACKEND") or "auto"
    if name == "auto":
        return _instance(auto_choice()[0])
    if name not in registry.backends():
        raise KeyError(
            f"unknown backend {name!r}; registered backends: {', '.join(backend_names()) or 'none'}"
        )
    return _instance(name)


def auto_choice() -> tuple[str, dict[str, str]]:
    """(chosen name, why each better-ranked backend was passed over)."""
    passed_over: dict[str, str] = {}
    for entry in sorted(registry.backends().values(), key=lambda e: -e.priority):
        ok, why = _instance(entry.name).available()
        if ok:
            return entry.name, passed_over
        passed_over[entry.name] = why
    raise RuntimeError(f"no backend is available here: {passed_over}")


def _instance(name: str) -> Backend:
    if name not in _instances:
        _instances[name] = registry.backends()[name].load()()
    return _instances[name]
