"""Run as a script: import every module of every installed iron package (the
``iron`` namespace, wherever its parts are installed) and print, as JSON,
the module-level names that hold mutable state and the environment
variables the imports set. Run in a fresh interpreter, so nothing imported
earlier hides what an import does."""

import __future__

import enum
import functools
import importlib
import inspect
import json
import logging
import os
import pathlib
import re
import struct
import sys
import types
import typing

import attrs
import numpy as np
import pluggy

#: process-wide by nature, each with its reason
ALLOWED = {
    "iron.core.registry._registry": "the registry's plugin table",
    "iron.ops.gemm.host._blas_lock": "OpenBLAS's thread count is one per process",
    # a bounded memo (64 decoded B chunks) of the FLM kernel model, which the
    # simulator calls with arrays alone: iron-ops-flm's to move
    "iron.ops.flm.design._decoded": "bounded kernel-model memo, iron-ops-flm's",
    "iron.ops.flm.design._a_tile": "bounded kernel-model memo, iron-ops-flm's",
    # a family's kernel manifest, data shipped in the package and read once
    "iron.design.manifest.load": "package data read once",
    "iron.ops.gemm.gemm.load": "iron.design.manifest.load, imported by name",
}

_IMMUTABLE = (
    type(None), bool, int, float, complex, str, bytes, range, type(Ellipsis), type, re.Pattern,
    types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
    types.GenericAlias, types.UnionType, typing.TypeVar, property, staticmethod, classmethod,
    np.dtype, np.generic, struct.Struct, logging.Logger, enum.Enum, pathlib.PurePath,
    __future__._Feature, pluggy.HookimplMarker, pluggy.HookspecMarker,
)  # fmt: skip


def immutable(value) -> bool:
    if isinstance(value, _IMMUTABLE):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(immutable(v) for v in value)
    if isinstance(value, np.ndarray):
        return not value.flags.writeable
    if isinstance(value, functools._lru_cache_wrapper):  # a cached function of nothing: a constant
        return not inspect.signature(value).parameters
    if isinstance(value, functools.partial):
        return immutable(value.func) and immutable(value.args)
    if type(value).__module__.startswith(("typing", "numba.")) and callable(value):
        return True  # typing's special forms; numba's compiled functions
    if callable(value) and type(value).__module__.startswith("_pytest"):
        return True  # a fixture's definition
    if (
        attrs.has(type(value))
        and getattr(type(value).__setattr__, "__name__", "") == "_frozen_setattrs"
    ):
        return all(immutable(getattr(value, f.name)) for f in attrs.fields(type(value)))
    return False


def modules() -> list[str]:
    import iron

    names = set()
    for root in map(pathlib.Path, iron.__path__):
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            names.add(".".join(("iron", *(parts[:-1] if parts[-1] == "__init__" else parts))))
    return sorted(names)


def main() -> None:
    before = dict(os.environ)
    found, failed = [], []
    for name in modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:  # an optional extra that is not installed
            if (error.name or "").startswith("iron"):
                failed.append(f"{name}: {error}")
            continue
        for key, value in vars(module).items():
            qualified = f"{name}.{key}"
            if (
                key.startswith("__")
                or qualified in ALLOWED
                or key.isupper()
                or key.lstrip("_").isupper()
            ):
                continue  # dunders; the allowed; UPPER_CASE names, constants by convention
            if not immutable(value):
                found.append(f"{qualified}: {type(value).__name__}")
    changed = sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k))
    json.dump({"mutable": found, "environment": changed, "failed": failed, "modules": modules()},
              sys.stdout)  # fmt: skip


if __name__ == "__main__":
    main()
