"""Choosing a backend: by name, by ``IRON_BACKEND``, or ``auto`` (the
highest-priority registered backend that is available here). Instances
belong to a `Session`; without one, each call makes a session of its own
(a backend to ask `available()` or its name, freed when dropped)."""

from __future__ import annotations

from iron.core import registry
from iron.dispatch.backends import Backend
from iron.dispatch.session import Session


def backend_names() -> list[str]:
    return sorted(registry.backends())


def get_backend(name: str | None = None, session: Session | None = None) -> Backend:
    """The backend `name` of `session` (default: a new one); None means
    ``IRON_BACKEND`` (default "auto")."""
    return (session or Session()).backend(name)


def auto_choice(session: Session | None = None) -> tuple[str, dict[str, str]]:
    """(chosen name, why each better-ranked backend was passed over)."""
    return (session or Session()).auto_choice()
