"""iron-core: NPU device descriptions, the operator model, graph capture,
the plugin registry, IRON's pytest plugin and the `iron` CLI."""

from iron.core.capture import Binding, Buffer, CaptureError, Expr, Graph, Step, Value, capture
from iron.core.device import Device, TileLimits
from iron.core.hookspecs import hookimpl
from iron.core.operator import (
    BindError,
    Case,
    Composite,
    Operator,
    OperatorError,
    per_call,
    require,
    tunable,
)
from iron.core.spec import (
    IN,
    INOUT,
    OUT,
    ArgSpec,
    Direction,
    as_dtype,
    bf16,
    dtype_name,
    same_shape_binary,
    same_shape_unary,
)
from iron.core.tolerance import Tolerance, Verdict, compare
from iron.core.view import View

__all__ = [
    "IN",
    "INOUT",
    "OUT",
    "ArgSpec",
    "BindError",
    "Binding",
    "Buffer",
    "CaptureError",
    "Case",
    "Composite",
    "Device",
    "Direction",
    "Expr",
    "Graph",
    "Operator",
    "OperatorError",
    "Step",
    "TileLimits",
    "Tolerance",
    "Value",
    "Verdict",
    "View",
    "as_dtype",
    "bf16",
    "capture",
    "compare",
    "dtype_name",
    "hookimpl",
    "per_call",
    "require",
    "same_shape_binary",
    "same_shape_unary",
    "tunable",
]
