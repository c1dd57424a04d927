"""Process-wide settings: every ``IRON_*`` environment variable, read here
and nowhere else. `current()` reads the environment when called (a test
that sets a variable sees it at once); `Settings.sources` says where each
value came from, which `iron doctor` prints."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import attrs


@attrs.frozen
class Variable:
    """One environment variable, the field of `Settings` it sets and its
    default as it would be written (what each does: the iron-core README's
    settings table)."""

    name: str
    field: str
    default: str


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
    Variable("IRON_POISON", "poison", "0"),
    Variable("IRON_CACHE_HOME", "cache_home", "the user cache directory + /iron"),
    Variable("IRON_PLUGINS", "plugins", ""),
    Variable("IRON_DISABLE_PLUGINS", "disable_plugins", ""),
    Variable("IRON_DEBUG", "debug", "0"),
    Variable("IRON_REQUIRE_FIXTURE_PLUGINS", "require_fixture_plugins", "0"),
)


def _flag(variable: str, text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(f"{variable}={text!r}: a flag is 0 or 1")
    return text == "1"


def _names(text: str) -> frozenset[str]:
    return frozenset(n.strip() for n in text.split(",") if n.strip())


@attrs.frozen
class Settings:
    """The effective value of every variable of `VARIABLES` (an empty
    variable counts as unset), and `sources`: variable -> "env" or
    "default". `plugins` is None when every plugin may load. A flag that is
    not 0 or 1 raises `ValueError` naming the variable."""

    backend: str
    device: str
    poison: bool
    cache_home: Path
    plugins: frozenset[str] | None
    disable_plugins: frozenset[str]
    debug: bool
    require_fixture_plugins: bool
    sources: Mapping[str, str]

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Settings:
        raw = {v.name: environ.get(v.name, "").strip() for v in VARIABLES}
        given = {name: text for name, text in raw.items() if text}
        text = {v.name: given.get(v.name, v.default) for v in VARIABLES}
        return cls(
            backend=text["IRON_BACKEND"],
            device=text["IRON_DEVICE"],
            poison=_flag("IRON_POISON", text["IRON_POISON"]),
            cache_home=Path(given["IRON_CACHE_HOME"])
            if "IRON_CACHE_HOME" in given
            else _default_cache_home(),
            plugins=_names(given["IRON_PLUGINS"]) if "IRON_PLUGINS" in given else None,
            disable_plugins=_names(text["IRON_DISABLE_PLUGINS"]),
            debug=_flag("IRON_DEBUG", text["IRON_DEBUG"]),
            require_fixture_plugins=_flag(
                "IRON_REQUIRE_FIXTURE_PLUGINS", text["IRON_REQUIRE_FIXTURE_PLUGINS"]
            ),
            sources={v.name: "env" if v.name in given else "default" for v in VARIABLES},
        )

    def rows(self) -> list[tuple[str, str, str]]:
        """(variable, effective value as text, source) per variable."""
        rows = []
        for variable in VARIABLES:
            value = getattr(self, variable.field)
            if isinstance(value, bool):
                shown = "1" if value else "0"
            elif isinstance(value, frozenset):
                shown = ",".join(sorted(value))
            elif value is None:
                shown = "(all)"
            else:
                shown = str(value)
            rows.append((variable.name, shown, self.sources[variable.name]))
        return rows


def current() -> Settings:
    """The settings of this process's environment, read now."""
    return Settings.from_environment(os.environ)
