"""Graph capture: the IR every other package reads.

    with capture() as g:
        x = g.input("x", (64, 256))
        h = g(RMSNorm(size=x.size, tile_size=256, weighted=True), x, g.weight("norm", w))
        y = g(SiLU(size=h.size), h)            # (64, 256) feeds (16384,): same bytes
        g(SiLU(size=h.size), h, h)             # in place: the output is an argument

Values are data-free placeholders that carry a buffer name, shape and dtype;
an operator's own `arg_spec` decides the shapes it produces. Roles are
explicit: inputs, weights (arrays, keyed by storage), states (zeroed,
persistent), intermediates (from steps), and slices along the leading axis
(named ``base[start:stop]`` in bytes, never pooled).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping

import attrs
import numpy as np

from iron.core.operator import Composite, Operator
from iron.core.spec import ArgSpec, as_dtype, bf16, dtype_name
from iron.core.view import View, base_of


class CaptureError(ValueError):
    """A recorded step does not fit its operator's spec."""


# ---- per-call scalars ------------------------------------------------------


@attrs.frozen
class Expr:
    """An affine integer expression over a graph's per-call scalars, such as
    ``cache_offset * 128 + 64``: what a binding evaluates on every call."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(value) -> Expr:
        if isinstance(value, Expr):
            return value
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return Expr((), int(value))
        raise TypeError(
            f"a per-call value must be an int or an expression of scalars, got {value!r}"
        )

    def _combine(self, other: Expr, sign: int) -> Expr:
        coeffs = dict(self.terms)
        for name, c in other.terms:
            coeffs[name] = coeffs.get(name, 0) + sign * c
        return Expr(
            tuple(sorted((n, c) for n, c in coeffs.items() if c)), self.const + sign * other.const
        )

    def __add__(self, other) -> Expr:
        return self._combine(Expr.of(other), 1)

    __radd__ = __add__

    def __sub__(self, other) -> Expr:
        return self._combine(Expr.of(other), -1)

    def __rsub__(self, other) -> Expr:
        return Expr.of(other)._combine(self, -1)

    def __neg__(self) -> Expr:
        return Expr().__sub__(self)

    def __mul__(self, factor) -> Expr:
        if not isinstance(factor, (int, np.integer)) or isinstance(factor, bool):
            raise TypeError(f"a per-call expression can only be scaled by an int, got {factor!r}")
        f = int(factor)
        return Expr(tuple((n, c * f) for n, c in self.terms if c * f), self.const * f)

    __rmul__ = __mul__

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms)

    def evaluate(self, values: Mapping[str, int]) -> int:
        return self.const + sum(c * int(values[n]) for n, c in self.terms)

    def __str__(self) -> str:
        parts = [n if c == 1 else f"{c}*{n}" for n, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


@attrs.frozen
class Binding:
    """Step `step`'s operator takes per-call `member` from `expression`,
    evaluated on every call (a listing of what the steps carry)."""

    step: int
    op: Operator
    member: str
    expression: Expr


# ---- values and steps ------------------------------------------------------


@attrs.frozen
class Buffer:
    """A named allocation in a graph (slices are views of one)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    role: str  # input | weight | state | intermediate

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


class Value:
    """A placeholder for an array in a graph: a buffer (or a `View` of one)
    seen with a shape and dtype. `reshape` and slicing are free."""

    __slots__ = ("dtype", "graph", "ref", "shape")

    def __init__(self, graph: Graph, ref: str | View, shape, dtype) -> None:
        self.graph, self.ref = graph, ref
        self.shape, self.dtype = tuple(int(d) for d in shape), as_dtype(dtype)

    @property
    def name(self) -> str:
        """The buffer's name, or the view as text (``kv[32:48]``), for messages."""
        return str(self.ref)

    @property
    def buffer(self) -> str:
        return base_of(self.ref)

    @property
    def role(self) -> str:
        return "slice" if self.is_slice else self.graph.buffers[self.buffer].role

    @property
    def is_slice(self) -> bool:
        return isinstance(self.ref, View)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def reshape(self, *shape) -> Value:
        shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape = tuple(self.size // known if d == -1 else d for d in shape)
        if math.prod(shape) != self.size:
            raise CaptureError(
                f"cannot reshape {self.name} {self.shape} to {shape}: element counts differ"
            )
        return Value(self.graph, self.ref, shape, self.dtype)

    def __getitem__(self, index) -> Value:
        if self.is_slice:
            raise CaptureError(
                f"{self.name} is already a slice; a slice of a slice is not supported"
            )
        if not self.shape:
            raise CaptureError(f"{self.name} is a scalar and cannot be sliced")
        rows, row_shape = self.shape[0], self.shape[1:]
        if isinstance(index, (int, np.integer)):
            i = int(index) + rows if index < 0 else int(index)
            if not 0 <= i < rows:
                raise IndexError(f"row {index} out of range for {self.name} with {rows} rows")
            start, stop, shape = i, i + 1, row_shape
        elif isinstance(index, slice):
            start, stop, step = index.indices(rows)
            if step != 1 or stop <= start:
                raise CaptureError(
                    f"{self.name}[{index.start}:{index.stop}]: slices are non-empty unit-step row ranges"
                )
            shape = (stop - start, *row_shape)
        else:
            raise TypeError(
                f"{self.name}: index the leading axis with an int or a slice, got {index!r}"
            )
        row_bytes = math.prod(row_shape) * self.dtype.itemsize
        view = View(self.buffer, start * row_bytes, stop * row_bytes)
        return Value(self.graph, view, shape, self.dtype)

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.shape}, {dtype_name(self.dtype)}, {self.role})"


@attrs.frozen
class Step:
    """One call: the operator, one buffer name or `View` per arg spec, and
    the expressions that feed the operator's per-call members on every call
    (members left out take their field values)."""

    op: Operator
    args: tuple[str | View, ...]
    specs: tuple[ArgSpec, ...] = attrs.field(repr=False)
    bindings: Mapping[str, Expr] = attrs.field(factory=dict, converter=dict)

    @property
    def reads(self) -> tuple[str | View, ...]:
        return tuple(a for a, s in zip(self.args, self.specs) if s.reads)

    @property
    def writes(self) -> tuple[str | View, ...]:
        return tuple(a for a, s in zip(self.args, self.specs) if s.writes)


# ---- the graph -------------------------------------------------------------


class Graph:
    """A recording of operator calls. Call it like a function: ``y = g(op,
    x)`` allocates the outputs the operator's spec declares; ``g(op, x, out)``
    with a full argument list writes into the given values instead."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.steps: list[Step] = []
        self.buffers: dict[str, Buffer] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.scalars: dict[str, np.dtype] = {}
        self._weight_names: dict[tuple, str] = {}
        self._counter = 0

    # ---- declarations ----

    def _declare(self, name: str, shape, dtype, role: str) -> Value:
        if not isinstance(name, str) or not name or "[" in name:
            raise CaptureError(f"buffer names are non-empty strings without '[': {name!r}")
        if name in self.buffers:
            raise CaptureError(f"{self.name}: buffer {name!r} is already declared")
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        self.buffers[name] = Buffer(name, tuple(int(d) for d in shape), as_dtype(dtype), role)
        return Value(self, name, shape, dtype)

    def input(self, name: str, shape, dtype=bf16) -> Value:
        """A host input, written before every call."""
        return self._declare(name, shape, dtype, "input")

    def weight(self, name: str, array: np.ndarray) -> Value:
        """A constant, uploaded once. The same storage registered twice is one
        buffer (the first name wins)."""
        if not isinstance(array, np.ndarray):
            raise TypeError(f"weight {name!r} must be a numpy array, got {type(array).__name__}")
        key = storage_key(array)
        if key in self._weight_names:
            existing = self.buffers[self._weight_names[key]]
            return Value(self, existing.name, existing.shape, existing.dtype)
        value = self._declare(name, array.shape, array.dtype, "weight")
        self.weights[name] = array
        self._weight_names[key] = name
        return value

    def state(self, name: str, shape, dtype=bf16) -> Value:
        """A buffer that starts zeroed and persists across calls (a KV cache)."""
        return self._declare(name, shape, dtype, "state")

    def scalar(self, name: str, dtype=np.int32) -> Expr:
        """A per-call integer the caller passes on every call."""
        if name in self.scalars:
            raise CaptureError(f"{self.name}: scalar {name!r} is already declared")
        self.scalars[name] = as_dtype(dtype)
        return Expr(((name, 1),), 0)

    # ---- recording ----

    def __call__(self, op: Operator, *args: Value, name: str | None = None, **values):
        if isinstance(op, Composite):
            return op.expand(self, *args, **values)
        if not isinstance(op, Operator):
            raise TypeError(f"{self.name}: g(...) takes an Operator first, got {type(op).__name__}")
        index, cls = len(self.steps), type(op).__name__
        label = f"{self.name} step {index} ({cls})"
        specs = op.arg_specs()
        n_reads = sum(1 for s in specs if s.direction.reads)
        if len(args) == len(specs):
            given = list(args)
        elif len(args) == n_reads:
            inputs = iter(args)
            given = [next(inputs) if s.direction.reads else None for s in specs]
        else:
            names = ", ".join(s.name for s in specs if s.direction.reads)
            raise TypeError(
                f"{label}: takes its {n_reads} input(s) ({names}) or all {len(specs)} arguments; "
                f"got {len(args)}"
            )
        bindings = self._bindings(label, op, values)
        outputs, refs = [], []
        for spec, value in zip(specs, given):
            if value is None:
                value = self._fresh(name if name and len(outputs) == 0 else None, spec, cls)
            else:
                self._check(label, spec, value)
            if spec.writes:
                role = self.buffers[value.buffer].role
                if role in ("input", "weight"):
                    raise CaptureError(
                        f"{label}: writes {spec.name} into {value.name}, a graph {role}; "
                        "inputs and weights are read-only"
                    )
                outputs.append(value)
            refs.append(value.ref)
        self.steps.append(Step(op, tuple(refs), tuple(specs), bindings))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _bindings(self, label: str, op: Operator, values: Mapping) -> dict[str, Expr]:
        """`values` (per-call member -> int or expression of declared scalars),
        checked against the operator's per-call members."""
        members = op.per_call_members()
        bindings = {}
        for member, expression in values.items():
            if member not in members:
                known = ", ".join(members) or "none"
                raise TypeError(
                    f"{label}: {type(op).__name__} has no per-call member {member!r} (per-call members: {known})"
                )
            bindings[member] = expression = Expr.of(expression)
            unknown = [s for s in expression.symbols if s not in self.scalars]
            if unknown:
                raise CaptureError(
                    f"{label}: {member} uses undeclared scalar(s) {', '.join(unknown)}"
                )
        return bindings

    def _fresh(self, name: str | None, spec: ArgSpec, cls: str) -> Value:
        if name is None:
            self._counter += 1
            name = f"{cls.lower()}{self._counter}"
            while name in self.buffers:
                self._counter += 1
                name = f"{cls.lower()}{self._counter}"
        return self._declare(name, spec.shape, spec.dtype, "intermediate")

    def _check(self, label: str, spec: ArgSpec, value) -> None:
        if not isinstance(value, Value) or value.graph is not self:
            raise TypeError(
                f"{label}: argument {spec.name} must be a value of this graph, got {value!r}"
            )
        if value.dtype != spec.dtype:
            raise CaptureError(
                f"{label}: argument {spec.name} is {value.name} of dtype "
                f"{dtype_name(value.dtype)}; the spec wants {dtype_name(spec.dtype)}"
            )
        same_rank = len(value.shape) == len(spec.shape)
        if (same_rank and value.shape != spec.shape) or value.size != spec.size:
            raise CaptureError(
                f"{label}: argument {spec.name} is {value.name} of shape {value.shape}; "
                f"the spec wants {spec.shape}"
            )

    # ---- reading the recording ----

    @property
    def bindings(self) -> list[Binding]:
        """Every step's bindings, in step order."""
        return [
            Binding(i, step.op, member, expression)
            for i, step in enumerate(self.steps)
            for member, expression in step.bindings.items()
        ]

    def accesses(self) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """(reads, writes) buffer names per step, in order, a view counting as
        its base: what planning reads."""
        return [(tuple(map(base_of, s.reads)), tuple(map(base_of, s.writes))) for s in self.steps]

    def infer_io(self) -> tuple[list[str], list[str]]:
        """(inputs, outputs): buffers consumed and never produced, and buffers
        produced and never consumed (weights and states are neither)."""
        produced: dict[str, None] = {}
        consumed: dict[str, None] = {}
        for step in self.steps:
            for ref in step.reads:
                consumed.setdefault(base_of(ref))
            for ref in step.writes:
                produced.setdefault(base_of(ref))
        host = {n for n, b in self.buffers.items() if b.role in ("input", "intermediate")}
        inputs = [n for n in consumed if n not in produced and n in host]
        outputs = [n for n in produced if n not in consumed and n in host]
        return inputs, outputs

    def pinned(self) -> dict[str, int]:
        """Buffers with a host address of their own, never pooled: weights,
        states and every buffer something slices. Name -> bytes."""
        names = {n for n, b in self.buffers.items() if b.role in ("weight", "state")}
        names |= {a.base for s in self.steps for a in s.args if isinstance(a, View)}
        return {n: self.buffers[n].nbytes for n in sorted(names)}

    def nbytes(self, ref: str | View) -> int:
        """Bytes of a buffer or a view."""
        return ref.nbytes if isinstance(ref, View) else self.buffers[ref].nbytes

    def summary(self) -> str:
        lines = [f"graph {self.name}: {len(self.steps)} steps, {len(self.buffers)} buffers"]
        for i, step in enumerate(self.steps):
            lines.append(f"  {i:3} {type(step.op).__name__:16} {', '.join(map(str, step.args))}")
        return "\n".join(lines)


def storage_key(array: np.ndarray) -> tuple:
    """What identifies a weight's storage: its memory, extent and layout."""
    return (
        array.__array_interface__["data"][0],
        array.nbytes,
        array.dtype.str,
        array.shape,
        array.strides,
    )


@contextlib.contextmanager
def capture(name: str = "graph") -> Iterator[Graph]:
    """Record a graph: ``with capture() as g: y = g(op, x)``."""
    yield Graph(name)
