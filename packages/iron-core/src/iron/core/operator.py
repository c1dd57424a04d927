"""The operator model.

An operator is an attrs class whose fields are its parameters. Its shape rule
is a plain function, `arg_spec`, whose parameters are filled from the
operator's fields and properties by name, so the shape an operator would have
can be asked before one is built, and nothing about a design is inherited to
share a shape. Per-call values (a cache offset, a valid length) are fields
declared with `per_call()`: they reach the reference as keyword arguments and
are never part of identity.

    @attrs.frozen
    class Scale(Operator):
        size: int
        factor: float = 2.0

        @staticmethod
        def arg_spec(size, dtype=bf16):
            return same_shape_unary(size, dtype)

        def validate(self):
            require(self, "size", self.size % 2 == 0, "must be even (DMA moves 4-byte words)")

        def reference(self, x):
            return (x.astype(np.float32) * self.factor).astype(bf16)

        def tolerance(self, device=None, *, inputs=None):
            return Tolerance.relative(0.01)
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs
import numpy as np

from iron.core.device import Device
from iron.core.spec import ArgSpec, as_dtype, dtype_name
from iron.core.tolerance import Tolerance

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_PER_CALL = "iron.per_call"
_TUNABLE = "iron.tunable"


class OperatorError(ValueError):
    """A parameter broke one of the operator's rules."""


class BindError(TypeError):
    """A function asked for a parameter the operator cannot supply."""


def require(op, parameter: str, condition, rule: str) -> None:
    """Raise `OperatorError` naming the operator, `parameter` (with its value)
    and `rule` unless `condition` holds. `op` may be an operator or its class."""
    if condition:
        return
    cls = op if isinstance(op, type) else type(op)
    shown = parameter
    if op is not cls and hasattr(op, parameter):
        value = getattr(op, parameter)
        # as the caller spells it: an enum by its value, a dtype by its name
        shown += "=" + (repr(value.value) if isinstance(value, enum.Enum) else _text(value))
    raise OperatorError(f"{cls.__name__}: {shown}: {rule}")


def per_call(default: int = 0, *, dtype=np.int32):
    """Declare a per-call (dispatch-time) member: a value that may change on
    every call of one compiled graph (a cache offset, a valid length). Its
    field value is the default the reference sees when nothing is bound."""
    return attrs.field(default=default, kw_only=True, metadata={_PER_CALL: as_dtype(dtype)})


def tunable(default=None, **kwargs):
    """Declare a tunable (column count, tile size): the caller may give it;
    `resolve(device)` fills it otherwise through the operator's `tune`."""
    return attrs.field(default=default, kw_only=True, metadata={_TUNABLE: True}, **kwargs)


@attrs.frozen
class Case:
    """One declared construction of an operator, used by the conformance
    checks and the spec snapshot."""

    params: Mapping[str, Any] = attrs.field(converter=dict)
    id: str | None = None

    @property
    def label(self) -> str:
        return self.id or ",".join(f"{k}={_text(v)}" for k, v in self.params.items())


def _text(value) -> str:
    """Stable text of a parameter value (no object addresses if avoidable)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, np.generic):
        return _text(value.item())
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, Device):
        return value.key
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_text(v) for v in value)
        return (
            f"[{inner}]"
            if isinstance(value, list)
            else f"({inner}{',' if len(value) == 1 else ''})"
        )
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_text(k)}: {_text(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, (np.dtype, type)):
        try:
            return dtype_name(value)
        except TypeError:
            pass
    return repr(value)


@attrs.frozen
class Operator:
    """Base of every operator. Subclasses are `@attrs.frozen` classes that
    provide:

    - `arg_spec(...)` (staticmethod): the shape rule, one `ArgSpec` per
      runtime buffer in call order; its parameters are bound by name;
    - `reference(*reads, **per_call) -> written`: numpy, bf16 in and out,
      float32 inside, one rounding per output; it receives the arrays of the
      specs it reads (IN and INOUT) in order and returns the arrays of the
      specs it writes (OUT and INOUT), one array or a tuple;
    - `tolerance(device, *, inputs=None)`: how close a device result must
      come to `reference` (see the method);
    - `validate()`: raise `OperatorError` (via `require`) for broken rules;
      it runs at construction and again once `device` is known;
    - `tune(device)`: values for tunables left unset;
    - `cases`: declared constructions for conformance and spec snapshots;
    - optionally `simulate(*reads, **per_call)` (see the method).
    """

    #: the device this operator was resolved for (None until `resolve`)
    device: Device | None = attrs.field(default=None, kw_only=True, repr=False)

    cases: ClassVar[tuple[Case, ...]] = ()

    def __attrs_post_init__(self) -> None:
        check_field_types(self)
        check_buffer_sizes(self)
        self.validate()

    # ---- declared surface -------------------------------------------------

    def validate(self) -> None:
        """Raise `OperatorError` if a parameter breaks a rule."""

    def tune(self, device: Device) -> dict[str, Any]:
        """Values for tunables left unset, chosen for `device`."""
        return {}

    def reference(self, *inputs, **per_call):
        raise NotImplementedError(f"{type(self).__name__} has no reference")

    def tolerance(self, device: Device | None = None, *, inputs=None) -> Tolerance:
        """How close a result computed on `device` (None: unknown, take the
        loosest device) must come to `reference`. `inputs`, when given, are
        the arrays the step read (its IN and INOUT specs, in order) as the
        device had them, and the per-call members hold that call's values:
        an operator whose bound scales with its data (a sum of products)
        derives it from them; others ignore them."""
        raise NotImplementedError(f"{type(self).__name__} defines no tolerance")

    def simulate(self, *inputs, **per_call):
        """A model of the device kernel, called like `reference`: its
        numerics or schedule where they differ from the reference's
        (block-float rounding, a tiled order). The `sim` backend runs it and
        compare mode judges it against `reference`. By default the
        reference itself."""
        return self.reference(*inputs, **per_call)

    # ---- derived ----------------------------------------------------------

    @classmethod
    def parameters(cls) -> list[str]:
        """The fields that define the operator (not `device`, not per-call)."""
        return [
            f.name for f in attrs.fields(cls) if f.name != "device" and _PER_CALL not in f.metadata
        ]

    @classmethod
    def per_call_members(cls) -> dict[str, np.dtype]:
        return {f.name: f.metadata[_PER_CALL] for f in attrs.fields(cls) if _PER_CALL in f.metadata}

    @classmethod
    def tunables(cls) -> list[str]:
        return [f.name for f in attrs.fields(cls) if _TUNABLE in f.metadata]

    def bind(self, fn: Callable, /, **explicit) -> dict[str, Any]:
        """Keyword arguments for `fn`, each taken from `explicit` first, then
        from this operator's field or property of the same name; a parameter
        with neither keeps its default. A parameter nothing can supply raises
        `BindError` naming the operator and the parameter."""
        parameters = inspect.signature(fn).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        unknown = [k for k in explicit if k not in parameters]
        if unknown and not takes_any:
            raise BindError(
                f"{type(self).__name__}: {_name(fn)} takes no parameter {', '.join(unknown)}"
            )
        kwargs, missing = dict(explicit), []
        for p in parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in kwargs:
                continue
            try:
                kwargs[p.name] = getattr(self, p.name)
            except AttributeError:
                if p.default is p.empty:
                    missing.append(p.name)
        if missing:
            raise BindError(
                f"{type(self).__name__} cannot supply {', '.join(missing)} to {_name(fn)}: "
                "no field or property of that name. Rename the parameter to match a field, "
                "or give it a default."
            )
        return kwargs

    def arg_specs(self) -> list[ArgSpec]:
        """This operator's runtime buffers, from its shape rule."""
        rule = getattr(type(self), "arg_spec", None)
        if rule is None:
            raise NotImplementedError(f"{type(self).__name__} declares no arg_spec shape rule")
        return list(rule(**self.bind(rule)))

    def call_reference(self, *inputs, **values) -> tuple[np.ndarray, ...]:
        """`reference` with every per-call member supplied (bound `values`
        first, field defaults otherwise); always returns a tuple."""
        members = self.per_call_members()
        unknown = set(values) - set(members)
        if unknown:
            raise TypeError(
                f"{type(self).__name__} has no per-call member {', '.join(sorted(unknown))}"
            )
        if not isinstance(self, Composite):
            check_inputs(self, inputs)
        out = self.reference(*inputs, **{m: values.get(m, getattr(self, m)) for m in members})
        return out if isinstance(out, tuple) else (out,)

    def resolve(self, device: Device) -> Operator:
        """A copy resolved for `device`: tunables left unset are filled by
        `tune` and every rule is checked again with the device known."""
        if not isinstance(device, Device):
            raise TypeError(
                f"{type(self).__name__}.resolve: device must be a Device "
                f"(Device.from_name({_text(device)}) for a name), got {type(device).__name__}"
            )
        if self.device == device:
            return self
        chosen = {k: v for k, v in self.tune(device).items() if getattr(self, k) is None}
        return attrs.evolve(self, device=device, **chosen)

    def identity_text(self) -> str:
        """Class, parameters and device as text: what makes two operators the
        same build. A parameter whose text holds an object address is refused:
        it would key every process differently and never hit a cache."""
        parts = []
        for name in self.parameters():
            text = _text(getattr(self, name))
            if _ADDRESS.search(text):
                raise OperatorError(
                    f"{type(self).__name__}: {name}={text}: the value's text contains an object "
                    "address, so its identity would change in every process; give it a value "
                    "with a stable text (a number, a string, a tuple, an enum)"
                )
            parts.append(f"{name}={text}")
        device = self.device.key if self.device is not None else "unresolved"
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}({', '.join(parts)})@{device}"

    def identity(self) -> str:
        """A stable digest of `identity_text()`: equal across processes."""
        return hashlib.sha256(self.identity_text().encode()).hexdigest()[:32]

    def example_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Random arrays for every spec the reference reads: floats standard
        normal, integers over their full range (int32 over +-2**10)."""
        return [
            random_array(rng, spec.shape, spec.dtype) for spec in self.arg_specs() if spec.reads
        ]


def check_inputs(op: Operator, inputs) -> None:
    """Raise `TypeError` unless `inputs` are one array per spec `op` reads,
    each of that spec's shape and dtype: a reference given the wrong arrays
    would broadcast or cast them and answer for an operator that was not
    asked."""
    reads = [spec for spec in op.arg_specs() if spec.reads]
    name = type(op).__name__
    if len(inputs) != len(reads):
        raise TypeError(
            f"{name}: reference takes {len(reads)} array(s) "
            f"({', '.join(s.name for s in reads)}), got {len(inputs)}"
        )
    for spec, array in zip(reads, inputs):
        shape, dtype = getattr(array, "shape", None), getattr(array, "dtype", None)
        if shape is None or dtype is None:
            raise TypeError(f"{name}: {spec.name}: a numpy array, got {type(array).__name__}")
        if tuple(shape) != tuple(spec.shape) or np.dtype(dtype) != np.dtype(spec.dtype):
            raise TypeError(
                f"{name}: {spec.name}: shape {tuple(spec.shape)} of {dtype_name(spec.dtype)} "
                f"by the arg spec, got {tuple(shape)} of {dtype_name(dtype)}"
            )


#: the largest runtime buffer an operator may declare: 1 TiB, beyond the
#: memory of any host an NPU shares (and beyond any file it could come from)
MAX_BUFFER_BYTES = 2**40


def check_buffer_sizes(op: Operator) -> None:
    """Raise `OperatorError` for a runtime buffer past `MAX_BUFFER_BYTES`,
    from the shape rule alone (O(1) in the sizes), before `validate` or
    `tune` plan anything per row or per tile. A shape rule that cannot run
    on these parameters is left to `validate` to explain."""
    rule = getattr(type(op), "arg_spec", None)
    if rule is None or isinstance(op, Composite):
        return
    try:
        specs = list(rule(**op.bind(rule)))
    except Exception:  # validate names the rule these parameters break
        return
    for spec in specs:
        if spec.nbytes > MAX_BUFFER_BYTES:
            raise OperatorError(
                f"{type(op).__name__}: {spec.name} {tuple(spec.shape)} is {spec.nbytes} bytes: "
                f"at most {MAX_BUFFER_BYTES} (1 TiB) per buffer, beyond any NPU host's memory"
            )


# ---- parameter types from field annotations ----------------------------------


def check_field_types(op: Operator) -> None:
    """Raise `OperatorError` for a field whose value does not match its
    annotation: `int` takes integers but not bools, floats or strings;
    `float` takes ints too; `bool` takes only bools; `X | None` takes None;
    enums, tuples and classes are checked by isinstance. An annotation this
    cannot read (a forward reference, a generic it does not know) is left
    to the operator's own `validate`."""
    for name, annotation in _field_annotations(type(op)).items():
        value = getattr(op, name)
        if _matches(value, annotation) is False:
            raise OperatorError(
                f"{type(op).__name__}: {name}={_shown(value)}: must be {_describe(annotation)}, "
                f"not {type(value).__name__}"
            )


@functools.cache
def _field_annotations(cls: type) -> dict[str, Any]:
    namespace = vars(sys.modules.get(cls.__module__, typing))
    found = {}
    for field in attrs.fields(cls):
        annotation = field.type
        if isinstance(annotation, str):
            try:
                # the class's own annotation text, read as typing.get_type_hints would
                annotation = eval(annotation, dict(namespace))
            except Exception:  # an annotation only a type checker can read
                continue
        if annotation is not None and field.name != "device":
            found[field.name] = annotation
    return found


def _matches(value, annotation) -> bool | None:
    """True or False where the annotation is understood; None otherwise."""
    if annotation is Any:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        verdicts = [_matches(value, arm) for arm in typing.get_args(annotation)]
        return True if True in verdicts else (None if None in verdicts else False)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        arms = typing.get_args(annotation)
        if len(arms) == 2 and arms[1] is Ellipsis:
            arms = (arms[0],) * len(value)
        elif len(arms) != len(value):
            return False
        verdicts = [_matches(v, arm) for v, arm in zip(value, arms)]
        return False not in verdicts
    if annotation is bool:
        return isinstance(value, (bool, np.bool_))
    if annotation is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if annotation is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
            value, (bool, np.bool_)
        )
    if isinstance(annotation, type) and origin is None:
        return isinstance(value, annotation)
    return None


def _describe(annotation) -> str:
    origin = typing.get_origin(annotation)
    if annotation is None or annotation is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arm) for arm in typing.get_args(annotation))
    if origin is tuple:
        arms = typing.get_args(annotation)
        if len(arms) == 2 and arms[1] is Ellipsis:
            return f"a tuple of {_describe(arms[0])}"
        return f"a tuple of {len(arms)} ({', '.join(_describe(a) for a in arms)})"
    plain = {
        int: "an int (a whole number; not a bool, float or string)",
        float: "a number",
        bool: "a bool (true or false)",
        str: "a string",
    }
    if annotation in plain:
        return plain[annotation]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return f"one of {', '.join(repr(m.value) for m in annotation)}"
    return getattr(annotation, "__name__", str(annotation))


def _shown(value) -> str:
    text = _text(value)
    return text if len(text) <= 60 else text[:57] + "..."


def random_array(rng: np.random.Generator, shape, dtype) -> np.ndarray:
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


class Composite(Operator):
    """An operator made of other operators. It has no spec of its own: it
    declares the specs of its inputs (`input_spec`, bound like `arg_spec`)
    and records its parts through the graph builder in `expand(g, *inputs)`,
    returning the values it produces."""

    def input_specs(self) -> list[ArgSpec]:
        rule = getattr(type(self), "input_spec", None)
        if rule is None:
            raise NotImplementedError(f"{type(self).__name__} declares no input_spec")
        return list(rule(**self.bind(rule)))

    def arg_specs(self) -> list[ArgSpec]:
        raise TypeError(
            f"{type(self).__name__} is a composite: it has no spec of its own; "
            "see input_specs() and expand()"
        )

    def expand(self, g, *inputs, **values):
        raise NotImplementedError(f"{type(self).__name__} does not define expand()")


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", repr(fn))
