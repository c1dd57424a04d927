"""IRON's elementwise family: elementwise arithmetic, activations, norms,
softmax, RoPE, data movement and int4 dequantisation.

Importing this package imports no operator module: `from iron.ops.eltwise
import RMSNorm` imports `iron.ops.eltwise.rms_norm` alone, on first use."""

from importlib import import_module

from iron.ops.eltwise.plugin import OPERATORS

_HELPERS = {"angle_table": "rope"}

__all__ = sorted([*OPERATORS, *_HELPERS])


def __getattr__(name: str):
    module = OPERATORS[name][0] if name in OPERATORS else _HELPERS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return [*globals(), *__all__]
