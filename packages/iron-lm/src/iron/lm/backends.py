"""Which backend a model runs on, and the ``IRON_*`` settings that decide
it, checked before any work: a value no backend or device answers to is a
`SettingsError` naming the variable, not a KeyError deep in a compile
(iron-core's `registry.checked_settings`, which every `iron` command asks too)."""

from __future__ import annotations

from iron.core import registry
from iron.core.registry import checked_settings
from iron.core.settings import SettingsError
from iron.dispatch.selection import get_backend

__all__ = ["SettingsError", "checked_settings", "choose_backend"]


def choose_backend(backend: str) -> str | None:
    """The backend a model runs on: `backend` as given, except "auto", which
    is the NPU where one is present and else `cpu` (host kernels on every
    core: the fastest host run); ``IRON_BACKEND``, when set, decides instead
    (None: iron-dispatch reads it, after `checked_settings` has vouched for it)."""
    if backend != "auto":
        return backend
    if checked_settings().backend != "auto":
        return None
    npu = "npu" in registry.backends() and get_backend("npu").available()[0]
    return "npu" if npu else "cpu"
