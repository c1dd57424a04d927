"""Lazy package attributes for operator families (PEP 562): ``from
iron.ops.eltwise import RMSNorm`` imports ``iron.ops.eltwise.rms_norm`` on
first use and nothing else, so importing a family stays as cheap as listing
it."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module


def lazy_exports(package: str, modules: Mapping[str, str]):
    """``(__getattr__, __dir__, __all__)`` for `package`, whose attribute
    `name` lives in the submodule ``package.modules[name]``."""
    names = sorted(modules)

    def __getattr__(name: str):
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{modules[name]}"), name)

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names
