"""Process-wide settings: every ``IRON_*`` environment variable, read here
and nowhere else. `current()` reads the environment when called (a test
that sets a variable sees it at once); `Settings.sources` says where each
value came from, which `iron doctor` prints. Every value is checked where
it is read: `current()` and `value()` refuse a malformed one, naming it;
`registry.checked_settings()` also one that names no installed backend,
device or plugin (what every command asks before it starts, and `iron
doctor` reports)."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from iron.core.files import file_kind


class SettingsError(ValueError):
    """An ``IRON_*`` variable holds a value no one can use: the message
    names the variable, its value and the rule."""


def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError("a flag is 0 or 1")
    return text == "1"


def _names(text: str) -> frozenset[str]:
    return frozenset(n.strip() for n in text.split(",") if n.strip())


def _folder(text: str) -> Path:
    """An absolute path that is a folder or nothing yet (the cache makes it)."""
    path = Path(text)
    if not path.is_absolute():
        raise ValueError("must be an absolute path (a relative one moves with the working folder)")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as error:
        raise ValueError(f"cannot be examined: {error.strerror or error}") from None
    if not stat.S_ISDIR(mode):
        raise ValueError(f"is {file_kind(mode)}, not a folder")
    return path


@attrs.frozen
class Variable:
    """One environment variable: the field of `Settings` it sets, its
    default as it would be written (what each does: the iron-core README's
    settings table), and `parse`, which reads a value given in the
    environment (raising `ValueError` with the rule it broke)."""

    name: str
    field: str
    default: str
    parse: Callable[[str], Any] = str


def _default_cache_home() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "iron"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local"
        return Path(local) / "iron" / "Cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "iron"


VARIABLES = (
    Variable("IRON_BACKEND", "backend", "auto"),
    Variable("IRON_DEVICE", "device", "npu2"),
    Variable("IRON_POISON", "poison", "0", _flag),
    Variable("IRON_CACHE_HOME", "cache_home", "the user cache directory + /iron", _folder),
    Variable("IRON_KERNEL_CACHE", "kernel_cache", "IRON_CACHE_HOME + /numba", _folder),
    Variable("IRON_PLUGINS", "plugins", "", _names),
    Variable("IRON_DISABLE_PLUGINS", "disable_plugins", "", _names),
    Variable("IRON_DEBUG", "debug", "0", _flag),
    Variable("IRON_REQUIRE_FIXTURE_PLUGINS", "require_fixture_plugins", "0", _flag),
)


def _given(environ: Mapping[str, str], variable: Variable) -> str | None:
    """The variable's text in `environ`, stripped; None when unset or empty."""
    return environ.get(variable.name, "").strip() or None


def value(name: str, environ: Mapping[str, str] | None = None):
    """One variable's effective value, read now (the others are not
    read: the registry asks for its lists this way, so a malformed flag
    does not stop it); `SettingsError` if it is malformed."""
    (variable,) = [v for v in VARIABLES if v.name == name]
    text = _given(os.environ if environ is None else environ, variable)
    if text is None:
        if variable.field == "cache_home":
            return _default_cache_home()
        if variable.field == "kernel_cache":
            return value("IRON_CACHE_HOME", environ) / "numba"
        return None if variable.field == "plugins" else variable.parse(variable.default)
    try:
        return variable.parse(text)
    except ValueError as error:
        raise SettingsError(f"{name}={text!r}: {error}") from None


@attrs.frozen
class Settings:
    """The effective value of every variable of `VARIABLES` (an empty
    variable counts as unset), and `sources`: variable -> "env" or
    "default". `plugins` is None when every plugin may load. A malformed
    value (a flag not 0 or 1, a cache folder that is a file or relative)
    raises `SettingsError` naming the variable (`registry.checked_settings`
    also asks the registry about backend, device and plugin names)."""

    backend: str
    device: str
    poison: bool
    cache_home: Path
    kernel_cache: Path
    plugins: frozenset[str] | None
    disable_plugins: frozenset[str]
    debug: bool
    require_fixture_plugins: bool
    sources: Mapping[str, str]

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Settings:
        return cls(
            **{v.field: value(v.name, environ) for v in VARIABLES},
            sources={v.name: "default" if _given(environ, v) is None else "env" for v in VARIABLES},
        )


def _shown(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    return "(all)" if value is None else str(value)


def problems(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variable -> what is wrong with its value, for every malformed one.
    (`registry.settings_problems` adds the names nothing installed answers to.)"""
    environ = os.environ if environ is None else environ
    found = {}
    for variable in VARIABLES:
        try:
            value(variable.name, environ)
        except SettingsError as error:
            found[variable.name] = str(error)
    return found


def report(
    found: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> list[tuple[str, str, str, str | None]]:
    """(variable, value as text, source, its problem in `found` or None)
    per variable (of this process's environment by default): what `iron
    doctor` shows, a malformed value as it was given."""
    environ = os.environ if environ is None else environ
    rows = []
    for variable in VARIABLES:
        given = _given(environ, variable)
        try:
            shown = _shown(value(variable.name, environ))
        except SettingsError:
            shown = given or ""
        source = "default" if given is None else "env"
        rows.append((variable.name, shown, source, found.get(variable.name)))
    return rows


def current() -> Settings:
    """The settings of this process's environment, read now."""
    return Settings.from_environment(os.environ)


def pin_kernel_cache() -> None:
    """Set ``IRON_KERNEL_CACHE`` in this process's environment, when unset,
    to its value now, so that moving ``IRON_CACHE_HOME`` later (a test's
    private cache) leaves compiled host kernels where they are; a malformed
    cache folder is left for its reader to refuse."""
    try:
        kernels = value("IRON_KERNEL_CACHE")
    except SettingsError:
        return
    os.environ.setdefault("IRON_KERNEL_CACHE", str(kernels))
