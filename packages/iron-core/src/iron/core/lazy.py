"""Lazy package attributes for operator families and heavy packages (PEP 562): ``from
iron.ops.eltwise import RMSNorm`` imports ``iron.ops.eltwise.rms_norm`` on
first use and nothing else, so importing a family stays as cheap as listing
it."""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from importlib import import_module


def lazy_exports(package: str, modules: Mapping[str, str]):
    """``(__getattr__, __dir__, __all__)`` for `package`, whose attribute
    `name` lives in the submodule ``package.modules[name]``."""
    names = sorted(modules)
    shadowing = frozenset(name for name, module in modules.items() if name == module)
    if shadowing:
        sys.modules[package].__class__ = _shadowing_package(shadowing)

    def __getattr__(name: str):
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{modules[name]}"), name)

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names


def _shadowing_package(names: frozenset[str]) -> type[types.ModuleType]:
    """A package class whose attributes `names` stay what the package
    exports (``iron.design.simulate``, the function) when the submodule of
    the same name is imported: Python would bind the submodule there, and an
    eager ``from iron.design.simulate import simulate`` in the package's
    ``__init__`` rebinds the function after it; a lazy one never runs."""

    class ShadowingPackage(types.ModuleType):
        def __setattr__(self, name: str, value) -> None:
            if name in names and isinstance(value, types.ModuleType):
                return  # the submodule stays in sys.modules; the name keeps the export
            super().__setattr__(name, value)

    return ShadowingPackage
