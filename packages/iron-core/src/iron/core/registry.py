"""The plugin registry: which operators, devices, backends and commands exist.

Plugins are modules named by entry points in the group ``iron.plugins``,
or registered in the running process with `register_plugin` (a notebook, a
test). Loading is defensive: a plugin that fails to import, or whose hook
raises, is reported with a warning naming its distribution and the error,
and skipped; the rest keep working. ``IRON_PLUGINS`` (a comma list of entry
point or distribution names) loads only those; ``IRON_DISABLE_PLUGINS``
skips those (``*`` skips every third-party plugin). iron-core's own plugin
(`iron.core.builtin`, loaded by name like the others) and in-process
plugins always load.

Listing imports plugin modules only: operator modules are imported one at a
time, by `get_operator`. The registry is the plugin table and nothing more:
operator classes it imported live until the next `reload`; backends are
made from their entries by whoever owns them (iron-dispatch's `Session`),
never kept here.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from importlib.metadata import entry_points
from typing import Any

import attrs
import pluggy

from iron.core import hookspecs, settings

ENTRY_POINT_GROUP = "iron.plugins"
BUILTIN = "iron.core.builtin"
#: every IRON distribution's name starts with it (imports stay `iron.*`): on the
#: package index `iron-core` is another project, and these names are free there
DISTRIBUTION_PREFIX = "iron-npu-"
CORE_DISTRIBUTION = DISTRIBUTION_PREFIX + "core"
IN_PROCESS = "(in process)"


class RegistryError(RuntimeError):
    """Two plugins disagree, or a registered target cannot be loaded."""


class IronPluginWarning(UserWarning):
    """A plugin failed to load and was skipped."""


def _import_target(target: str, what: str, plugin: str):
    module_name, _, attribute = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise RegistryError(
            f"{what} ({target}, from plugin {plugin!r}) cannot be loaded: {error}"
        ) from error


@attrs.frozen
class PluginInfo:
    name: str
    module: str
    distribution: str
    version: str
    status: str  # builtin | loaded | failed | disabled
    error: str | None = None


@attrs.frozen
class OperatorEntry:
    name: str
    target: str
    family: str
    summary: str
    plugin: str

    def load(self) -> type:
        return _import_target(self.target, f"operator {self.name}", self.plugin)


@attrs.frozen
class BackendEntry:
    name: str
    target: str
    summary: str
    priority: int
    plugin: str

    def load(self):
        return _import_target(self.target, f"backend {self.name}", self.plugin)


@attrs.frozen
class CommandEntry:
    name: str
    target: str
    help: str
    plugin: str

    def load(self):
        return _import_target(self.target, f"command {self.name}", self.plugin)


class Registry:
    """Everything the installed plugins offer. Loads on first use."""

    def __init__(self) -> None:
        self._loaded = False
        self._in_process: dict[str, object] = {}

    def reload(self) -> None:
        """Read the plugins again (the environment's allow and deny lists
        included); operator classes imported so far are dropped, so the next
        lookup imports fresh ones."""
        self._loaded = False
        self._load()

    def register_plugin(self, plugin, *, name: str | None = None) -> None:
        """Add `plugin` (a module, or any object with ``@hookimpl``
        functions) in this process, as if installed, until
        `unregister_plugin(name)`; `name` defaults to the module's name.
        The registry reloads on its next use."""
        name = name or getattr(plugin, "__name__", None)
        if not name:
            raise TypeError(f"register_plugin: {plugin!r} has no __name__; pass name=")
        if name in self._in_process or name == "core":
            raise ValueError(f"register_plugin: a plugin named {name!r} is already registered")
        self._in_process[name] = plugin
        self._loaded = False

    def unregister_plugin(self, name: str) -> None:
        """Remove a plugin `register_plugin` added; the registry reloads on its next use."""
        if self._in_process.pop(name, None) is None:
            known = ", ".join(self._in_process) or "none"
            raise KeyError(
                f"unregister_plugin: no in-process plugin {name!r} (registered: {known})"
            )
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        builtin = importlib.import_module(BUILTIN)
        pm = pluggy.PluginManager("iron")
        pm.add_hookspecs(hookspecs)
        pm.register(builtin, name="core")
        plugins = {
            "core": PluginInfo(
                "core", BUILTIN, CORE_DISTRIBUTION, _version(CORE_DISTRIBUTION), "builtin"
            )
        }
        for name, plugin in self._in_process.items():
            pm.register(plugin, name=name)
            module = getattr(plugin, "__name__", type(plugin).__name__)
            plugins[name] = PluginInfo(name, module, IN_PROCESS, "-", "loaded")
        allow = settings.value("IRON_PLUGINS")
        deny = settings.value("IRON_DISABLE_PLUGINS")
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist else "?"
            info = dict(name=ep.name, module=ep.value, distribution=dist, version=_version(dist))
            if ep.name in plugins:
                continue  # one distribution installed twice (or in process too): the first wins
            if (allow is not None and not {ep.name, dist} & allow) or {ep.name, dist, "*"} & deny:
                plugins[ep.name] = PluginInfo(**info, status="disabled")
                continue
            try:
                pm.register(ep.load(), name=ep.name)
            except Exception as error:
                plugins[ep.name] = self._failed(info, "failed to load", error)
                continue
            plugins[ep.name] = PluginInfo(**info, status="loaded")

        self._pm, self._plugins = pm, plugins
        self._operators: dict[str, OperatorEntry] = {}
        self._devices: dict[str, Any] = {}
        self._backends: dict[str, BackendEntry] = {}
        self._commands: dict[str, CommandEntry] = {}
        self._classes: dict[str, type] = {}
        self._collect("device", self._devices, self._device_entry)
        self._collect("operator", self._operators, self._operator_entry)
        self._collect("backend", self._backends, self._backend_entry)
        self._collect("command", self._commands, self._command_entry)
        self._loaded = True

    def _failed(self, info: dict, what: str, error: Exception) -> PluginInfo:
        message = f"{type(error).__name__}: {error}"
        warnings.warn(
            f"iron plugin {info['name']!r} (distribution {info['distribution']} {info['version']}) "
            f"{what} and is skipped: {message}",
            IronPluginWarning,
            stacklevel=4,
        )
        return PluginInfo(**info, status="failed", error=message)

    def _collect(self, kind: str, table: dict, make_entry) -> None:
        """Call one hook plugin by plugin, so a plugin that raises is skipped
        whole (none of its registrations kept) and every entry knows its plugin."""
        owners: dict[str, str] = {}
        for impl in getattr(self._pm.hook, f"iron_register_{kind}s").get_hookimpls():
            plugin, entries = impl.plugin_name, {}
            if self._plugins[plugin].status == "failed":
                continue

            def register(*args, plugin=plugin, entries=entries, **kwargs):
                entry = make_entry(plugin, *args, **kwargs)
                if entry.name in entries or entry.name in owners:
                    first = owners.get(entry.name, plugin)
                    raise RegistryError(
                        f"{kind} {entry.name!r} is registered by both plugin {first!r} and plugin {plugin!r}"
                    )
                entries[entry.name] = entry

            try:
                impl.function(register=register)
            except RegistryError:
                raise
            except Exception as error:
                info = self._plugins[plugin]
                fields = dict(
                    name=info.name,
                    module=info.module,
                    distribution=info.distribution,
                    version=info.version,
                )
                self._plugins[plugin] = self._failed(
                    fields, f"raised in iron_register_{kind}s", error
                )
                continue
            table.update(entries)
            owners.update(dict.fromkeys(entries, plugin))

    @staticmethod
    def _operator_entry(plugin, name, target, *, family=None, summary=""):
        return OperatorEntry(name, target, family or plugin, summary, plugin)

    @staticmethod
    def _device_entry(plugin, device):
        return device

    @staticmethod
    def _backend_entry(plugin, name, target, *, summary="", priority=0):
        return BackendEntry(name, target, summary, priority, plugin)

    @staticmethod
    def _command_entry(plugin, name, target, *, help=""):
        return CommandEntry(name, target, help, plugin)

    # ---- queries ----

    def plugins(self) -> list[PluginInfo]:
        self._load()
        return list(self._plugins.values())

    def operators(self, family: str | None = None) -> list[OperatorEntry]:
        self._load()
        return [
            e for _, e in sorted(self._operators.items()) if family is None or e.family == family
        ]

    def operator_names(self, family: str | None = None) -> list[str]:
        """Registered operator names (imports no operator module)."""
        return [e.name for e in self.operators(family)]

    def operator_entry(self, name: str) -> OperatorEntry:
        self._load()
        if name not in self._operators:
            close = difflib.get_close_matches(name, self._operators, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(
                f"unknown operator {name!r}{hint} (`iron ops list` shows all {len(self._operators)})"
            )
        return self._operators[name]

    def get_operator(self, name: str) -> type:
        """The operator class registered as `name` (imports only its module)."""
        entry = self.operator_entry(name)
        if name not in self._classes:
            self._classes[name] = entry.load()
        return self._classes[name]

    def devices(self) -> dict:
        self._load()
        return dict(self._devices)

    def backends(self) -> dict[str, BackendEntry]:
        self._load()
        return dict(self._backends)

    def backend_entry(self, name: str) -> BackendEntry:
        """The entry of registered backend `name`; its ``load()`` is the
        factory, called with the session that will own the instance."""
        self._load()
        if name not in self._backends:
            registered = ", ".join(sorted(self._backends)) or "none"
            raise KeyError(f"unknown backend {name!r}; registered backends: {registered}")
        return self._backends[name]

    def commands(self) -> dict[str, CommandEntry]:
        self._load()
        return dict(self._commands)

    def doctor(self) -> list[tuple[str, str, bool]]:
        """Findings from every plugin's `iron_doctor` hook; a plugin that
        raises is itself reported as a finding."""
        self._load()
        lines: list[tuple[str, str, bool]] = []
        for impl in self._pm.hook.iron_doctor.get_hookimpls():
            try:
                impl.function(
                    report=lambda label, value, ok=True: lines.append((label, str(value), bool(ok)))
                )
            except Exception as error:
                lines.append(
                    (
                        f"plugin {impl.plugin_name}",
                        f"doctor hook raised {type(error).__name__}: {error}",
                        False,
                    )
                )
        return lines


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "?"


def settings_problems() -> dict[str, str]:
    """Variable -> what is wrong with its value: malformed values
    (`settings.problems`) and, once none is, a backend, a device or a
    plugin name that nothing installed answers to."""
    found = settings.problems()
    if found:
        return found  # the registry reads these very values: ask it nothing
    current = settings.current()
    names = sorted(backends())
    if current.backend != "auto" and current.backend not in names:
        found["IRON_BACKEND"] = (
            f"IRON_BACKEND={current.backend!r}: not a registered backend "
            f"(registered: {', '.join(names) or 'none'}; or auto)"
        )
    names = sorted(devices())
    if current.device not in names:
        found["IRON_DEVICE"] = (
            f"IRON_DEVICE={current.device!r}: not a registered device "
            f"(registered: {', '.join(names)})"
        )
    installed = {n for p in plugins() for n in (p.name, p.distribution)}
    for variable, given, wildcard in (
        ("IRON_PLUGINS", current.plugins or frozenset(), set()),
        ("IRON_DISABLE_PLUGINS", current.disable_plugins, {"*"}),
    ):
        unknown = sorted(given - installed - wildcard)
        if unknown:
            found[variable] = (
                f"{variable}={','.join(sorted(given))!r}: no installed plugin is named "
                f"{', '.join(unknown)} (`iron plugins` lists them)"
            )
    return found


def checked_settings() -> settings.Settings:
    """The settings, once every value is known to be usable
    (`settings_problems`); `SettingsError` naming the first one otherwise."""
    found = settings_problems()
    if found:
        raise settings.SettingsError(next(iter(found.values())))
    return settings.current()


_registry = Registry()
plugins = _registry.plugins
operators = _registry.operators
operator_names = _registry.operator_names
operator_entry = _registry.operator_entry
get_operator = _registry.get_operator
devices = _registry.devices
backends = _registry.backends
backend_entry = _registry.backend_entry
commands = _registry.commands
doctor = _registry.doctor
reload = _registry.reload
register_plugin = _registry.register_plugin
unregister_plugin = _registry.unregister_plugin
