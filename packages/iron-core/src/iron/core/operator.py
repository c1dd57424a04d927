"""The operator model.

An operator is an attrs class whose fields are its parameters. Its shape rule
is a plain function, `arg_spec`, whose parameters are filled from the
operator's fields and properties by name, so the shape an operator would have
can be asked before one is built, and nothing about a design is inherited to
share a shape. Per-call values (a cache offset, a valid length) are fields
declared with `per_call()`: they reach the reference as keyword arguments and
are never part of identity.

A field's annotation is its type, checked by an attrs validator that the
class gets when it is defined (`ParameterType`, read from the annotation's
text without evaluating it); a shape rule or design that asks for a
parameter no field or property supplies fails then too, not when first
called.

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

import ast
import builtins
import enum
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
from iron.core.testing import random_array
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

    #: functions whose parameters are bound from the operator's fields by name
    BOUND: ClassVar[tuple[str, ...]] = ("arg_spec", "input_spec", "design")

    def __init_subclass__(cls, **kwargs) -> None:
        """At class definition, before attrs builds the class: give each
        field declared here its type's validator, and check that every
        parameter of `BOUND` functions is supplied by a field or property."""
        super().__init_subclass__(**kwargs)
        if "__attrs_attrs__" in cls.__dict__:  # attrs' slotted copy of a class already done
            return
        namespace = vars(sys.modules.get(cls.__module__, builtins))
        declared_types = {}
        for name, annotation in inspect.get_annotations(cls).items():
            if name == "device" or _is_class_var(annotation):
                continue
            where = f"{cls.__name__}.{name}"
            declared_types[name] = resolve_annotation(annotation, namespace, where)
            check = ParameterType(declared_types[name])
            declared = cls.__dict__.get(name, attrs.NOTHING)
            if isinstance(declared, _FIELD):
                declared.validator(check)
            else:
                setattr(cls, name, attrs.field(default=declared, validator=check))
        cls._declared_types = declared_types  # what `parameter_types` reads back
        _check_bound(cls)
        _check_cases(cls)

    def __attrs_post_init__(self) -> None:
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

    def check_call(self, **values) -> None:
        """Refuse a call's per-call (dispatch-time) values that break a rule
        (alignment, range), raising `OperatorError` naming the operator,
        the value and the rule. Dispatch calls it for every step with
        values bound per call before anything of the call is dispatched (a
        misaligned length hangs a real NPU). By default every value is
        accepted."""

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
    def parameter_types(cls) -> dict[str, Any]:
        """Each field's type, as its annotation names it (inherited ones too)."""
        found: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            found.update(vars(klass).get("_declared_types", {}))
        return found

    def to_data(self) -> dict[str, Any]:
        """The parameters as JSON values (tuples as lists, enums by value,
        dtypes by name): `from_data` makes an equal operator of them (its
        device aside), in any process."""
        return {name: _to_json(getattr(self, name)) for name in self.parameters()}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Operator:
        """The operator whose `to_data` is `data`, each value read back as
        its field's type says."""
        types = cls.parameter_types()
        return cls(
            **{name: _from_json(value, types.get(name, Any)) for name, value in data.items()}
        )

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

_FIELD = type(attrs.field())


class AnnotationError(TypeError):
    """A field's annotation names something that cannot be found."""


def resolve_annotation(annotation, namespace: Mapping[str, Any], where: str):
    """The type an annotation names. Text (``from __future__ import
    annotations``) is parsed, never evaluated: names are looked up in
    `namespace` and builtins, attributes read, ``X | Y`` and subscripts
    (``tuple[int, ...]``) applied; nothing else is allowed."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return _resolved(ast.parse(annotation, mode="eval").body, namespace)
    except (AnnotationError, SyntaxError, AttributeError, TypeError) as error:
        raise AnnotationError(
            f"{where}: annotation {annotation!r} cannot be read ({error}); define the names it "
            "uses before the class, or declare the field's type with an attrs validator"
        ) from None


def _resolved(node, namespace):
    if isinstance(node, ast.Name):
        if node.id in namespace:
            return namespace[node.id]
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        raise AnnotationError(f"{node.id!r} is not defined")
    if isinstance(node, ast.Attribute):
        return getattr(_resolved(node.value, namespace), node.attr)
    if isinstance(node, ast.Constant) and (node.value is None or node.value is Ellipsis):
        return node.value
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _resolved(ast.parse(node.value, mode="eval").body, namespace)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        arms = [_resolved(side, namespace) for side in (node.left, node.right)]
        return typing.Union[tuple(type(None) if a is None else a for a in arms)]  # noqa: UP007
    if isinstance(node, ast.Subscript):
        base, inner = _resolved(node.value, namespace), node.slice
        items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        arguments = tuple(_resolved(item, namespace) for item in items)
        return base[arguments if len(arguments) > 1 else arguments[0]]
    raise AnnotationError(f"{ast.dump(node)} is not a type")


def _is_class_var(annotation) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return typing.get_origin(annotation) is ClassVar


@attrs.frozen
class ParameterType:
    """An attrs validator: the value matches `annotation` (`int` takes
    integers but not bools, floats or strings; `float` takes ints too;
    `bool` only bools; `X | None` takes None; tuples element by element;
    any other class by isinstance), else `OperatorError` naming the
    operator, the parameter and the type."""

    annotation: Any

    def problem(self, owner: str, name: str, value) -> str | None:
        """What is wrong with `value` for parameter `name` of operator
        `owner` ("GEMM: M='abc': must be an int ..."), or None."""
        if _matches(value, self.annotation):
            return None
        return (
            f"{owner}: {name}={_shown(value)}: must be "
            f"{_describe(self.annotation)}, not {type(value).__name__}"
        )

    def __call__(self, op, attribute, value) -> None:
        problem = self.problem(type(op).__name__, attribute.name, value)
        if problem:
            raise OperatorError(problem)


def _check_cases(cls: type) -> None:
    """Refuse two declared cases with one label: a snapshot keys cases by
    label, so the second would silently replace the first."""
    seen = set()
    for case in vars(cls).get("cases", ()):
        if case.label in seen:
            raise OperatorError(
                f"{cls.__name__}: cases: two are labelled {case.label!r}; give one an id"
            )
        seen.add(case.label)


def _check_bound(cls: type) -> None:
    """Refuse a class whose `BOUND` functions ask for a parameter that no
    field (declared here or inherited) or attribute supplies and that has
    no default."""
    fields = {n for c in cls.__mro__ for n in inspect.get_annotations(c)}
    for function in cls.BOUND:
        fn = getattr(cls, function, None)
        if not callable(fn):
            continue
        missing = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.default is p.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and p.name not in fields
            and not hasattr(cls, p.name)
        ]
        if missing:
            raise BindError(
                f"{cls.__name__}.{function} takes {', '.join(missing)}, which no field or "
                f"property of {cls.__name__} supplies: rename the parameter to match a field, "
                "add the property, or give it a default"
            )


def _matches(value, annotation) -> bool:
    if annotation is Any or annotation is object:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arm) for arm in typing.get_args(annotation))
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        arms = typing.get_args(annotation)
        if len(arms) == 2 and arms[1] is Ellipsis:
            arms = (arms[0],) * len(value)
        return len(arms) == len(value) and all(_matches(v, a) for v, a in zip(value, arms))
    if annotation is bool:
        return isinstance(value, (bool, np.bool_))
    if annotation is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if annotation is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
            value, (bool, np.bool_)
        )
    cls = origin if isinstance(origin, type) else annotation
    try:
        return isinstance(value, cls)
    except TypeError:  # a type only a type checker can check (a protocol, a special form)
        return True


def _to_json(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, enum.Enum):
        return _to_json(value.value)
    if isinstance(value, np.dtype):
        return dtype_name(value)
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"no JSON value for {value!r} ({type(value).__name__})")


def _arms(annotation) -> tuple:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _from_json(value, annotation):
    """`value` (from `_to_json`) as `annotation` types it."""
    arms = _arms(annotation)
    if isinstance(value, list):
        shapes = [typing.get_args(a) for a in arms if typing.get_origin(a) is tuple] or [()]
        inner = shapes[0]
        if len(inner) == 2 and inner[1] is Ellipsis:
            inner = (inner[0],) * len(value)
        inner = inner if len(inner) == len(value) else (Any,) * len(value)
        return tuple(_from_json(v, a) for v, a in zip(value, inner))
    for arm in arms:
        if isinstance(arm, type) and issubclass(arm, enum.Enum):
            try:
                return arm(value)
            except ValueError:
                continue
        if arm is np.dtype and isinstance(value, str):
            return as_dtype(value)
    return value


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
