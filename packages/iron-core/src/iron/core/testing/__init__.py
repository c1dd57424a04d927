"""Test support for IRON and its plugins: test data here, and IRON's pytest
plugin (`iron.core.testing.plugin`, entry point ``pytest11``), whose
fixtures, markers and conformance helpers are importable from this package
too (imported on first use, so test data never needs pytest)::

    from iron.core.testing import check_conformance, conformance_params, random_array

Beside them: `iron.core.testing.readme` (a README's code blocks as tests)
and `iron.core.testing.pictures` (an SVG drawn by resvg, its pixels read).
"""

from __future__ import annotations

import argparse

import numpy as np

from iron.core.lazy import lazy_exports
from iron.core.spec import as_dtype


def random_array(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random test data of `shape` and `dtype`: floats standard normal,
    integers over their full range (wider than 16 bits: over +-2**10)."""
    dtype = as_dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = (
            (max(info.min, -(2**10)), min(info.max, 2**10))
            if dtype.itemsize > 2
            else (info.min, info.max)
        )
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def undescribed_arguments(parser: argparse.ArgumentParser) -> list[str]:
    """Every option and positional argument of `parser` and its
    subcommands, at any depth, that has no help text ("iron ops show:
    --json"): a test of a CLI asserts the list is empty."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share a parser
                found += undescribed_arguments(sub)
        elif not action.help and not isinstance(action, (argparse._HelpAction,)):
            found.append(f"{parser.prog}: {'/'.join(action.option_strings) or action.dest}")
    return found


#: what the pytest plugin offers, imported from it on first use
PLUGIN_NAMES = (
    "assert_snapshot_unchanged",
    "check_conformance",
    "check_importable_alone",
    "conformance_params",
    "modules_imported_by",
    "require_distribution",
)
__getattr__ = lazy_exports(__name__, dict.fromkeys(PLUGIN_NAMES, "plugin"))[0]
__all__ = ["random_array", "undescribed_arguments", *PLUGIN_NAMES]


def __dir__() -> list[str]:
    return sorted(__all__)
