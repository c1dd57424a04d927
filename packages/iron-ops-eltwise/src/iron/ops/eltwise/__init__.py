"""IRON's elementwise family: elementwise arithmetic, activations, norms,
softmax, RoPE, data movement and int4 dequantisation.

Importing this package imports no operator module: `from iron.ops.eltwise
import RMSNorm` imports `iron.ops.eltwise.rms_norm` alone, on first use."""

from iron.core.lazy import lazy_exports
from iron.ops.eltwise.plugin import OPERATORS

__getattr__, __dir__, __all__ = lazy_exports(
    __name__, {**{name: module for name, (module, _) in OPERATORS.items()}, "angle_table": "rope"}
)
