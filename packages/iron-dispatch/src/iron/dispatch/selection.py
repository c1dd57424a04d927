"""Choosing a backend: by name, by ``IRON_BACKEND``, or ``auto`` (the
highest-priority registered backend that is available here). Instances are
the registry's (`registry.backend`): one per registry load."""

from __future__ import annotations

from iron.core import registry, settings
from iron.dispatch.backends import Backend


def backend_names() -> list[str]:
    return sorted(registry.backends())


def get_backend(name: str | None = None) -> Backend:
    """The backend `name`; None means ``IRON_BACKEND`` (default "auto")."""
    if name is None:
        name = settings.current().backend
        if name != "auto" and name not in registry.backends():
            raise KeyError(
                f"IRON_BACKEND={name!r} is not a registered backend "
                f"(registered: {', '.join(backend_names()) or 'none'}; or auto)"
            )
    return registry.backend(auto_choice()[0] if name == "auto" else name)


def auto_choice() -> tuple[str, dict[str, str]]:
    """(chosen name, why each better-ranked backend was passed over)."""
    passed_over: dict[str, str] = {}
    for entry in sorted(registry.backends().values(), key=lambda e: -e.priority):
        ok, why = registry.backend(entry.name).available()
        if ok:
            return entry.name, passed_over
        passed_over[entry.name] = why
    raise RuntimeError(f"no backend is available here: {passed_over}")
