"""Which backend a model runs on, and the ``IRON_*`` settings that decide
it, checked before any work: a value no backend or device answers to is a
`SettingsError` naming the variable, not a KeyError deep in a compile."""

from __future__ import annotations

from iron.core import registry, settings
from iron.dispatch.selection import get_backend


class SettingsError(ValueError):
    """An ``IRON_*`` environment variable holds a value no one can use."""


def checked_settings() -> settings.Settings:
    """The process's settings, every value this package depends on checked:
    flags are 0 or 1, ``IRON_BACKEND`` is "auto" or a registered backend,
    ``IRON_DEVICE`` a registered device."""
    try:
        current = settings.current()
    except ValueError as error:  # a flag that is not 0 or 1, named by iron-core
        raise SettingsError(str(error)) from None
    backends = sorted(registry.backends())
    if current.backend != "auto" and current.backend not in backends:
        raise SettingsError(
            f"IRON_BACKEND={current.backend!r}: not a registered backend "
            f"(registered: {', '.join(backends) or 'none'}; or auto)"
        )
    devices = sorted(registry.devices())
    if current.device not in devices:
        raise SettingsError(
            f"IRON_DEVICE={current.device!r}: not a registered device "
            f"(registered: {', '.join(devices)})"
        )
    return current


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
