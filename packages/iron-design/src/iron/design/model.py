"""Designs as data: what the NPU does for one operator.

A `Design` mirrors what mlir-aie's IRON API expresses (runtime tensors,
object fifos between shim, memtile and core endpoints, memtile links,
workers running acquire / call / release bodies, kernels, and the runtime
sequence of fill and drain tasks), as frozen values: hashable, picklable,
comparable, and with a `digest()` that is equal across processes and
machines. Nothing here needs mlir-aie; `check`, `simulate` and `to_mlir`
read these values.

Conventions, as in mlir-aie: shapes and access patterns count elements;
dimension lists run highest dimension first (the outermost loop first);
offsets of memtile splits and joins count elements of the memtile object.

Construction checks structure only (names resolve, endpoints agree, shapes
are well formed) and raises `DesignError`; whether a design fits the device
is `iron.design.check`'s question.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import math
import re
import types
from collections.abc import Callable

import attrs
import ml_dtypes
import numpy as np

from iron.core.device import Device
from iron.core.spec import Direction


class DesignError(ValueError):
    """A design that is malformed, or (from `validate`) breaks a device limit."""


def require_design(caller: str, value) -> None:
    """Raise `TypeError` naming `caller` unless `value` is a `Design`: a
    name or an operator given instead would fail deep inside with an
    AttributeError that names neither."""
    if not isinstance(value, Design):
        hint = " (call the operator's design(device))" if hasattr(value, "design") else ""
        raise TypeError(
            f"{caller}: design must be an iron.design.Design{hint}, got {type(value).__name__}"
        )


# ---- element types -------------------------------------------------------------


@attrs.frozen
class ElementType:
    """One element type a tensor or object may hold. A block-float element is
    one block: `values` numbers sharing an exponent, packed in `nbytes`."""

    name: str
    numpy: np.dtype
    nbytes: int
    mlir: str
    values: int = 1

    @property
    def block_float(self) -> bool:
        return self.values > 1

    @property
    def floating(self) -> bool:
        """One float per element (bf16, f32); the rest are integers or blocks."""
        return self.name in ("bf16", "f32")

    @property
    def value_range(self) -> tuple[int | None, int | None]:
        """The ints a value of this type holds (a float type: its finite range)."""
        if self.block_float:
            return None, None
        if self.floating:
            largest = int(ml_dtypes.finfo(self.numpy).max)
            return -largest, largest
        info = np.iinfo(self.numpy)
        return int(info.min), int(info.max)


ELEMENT_TYPES = {
    t.name: t
    for t in (
        ElementType("bf16", np.dtype(ml_dtypes.bfloat16), 2, "bf16"),
        ElementType("f32", np.dtype(np.float32), 4, "f32"),
        ElementType("i8", np.dtype(np.int8), 1, "i8"),
        ElementType("i16", np.dtype(np.int16), 2, "i16"),
        ElementType("i32", np.dtype(np.int32), 4, "i32"),
        ElementType("u8", np.dtype(np.uint8), 1, "ui8"),
        ElementType("u16", np.dtype(np.uint16), 2, "ui16"),
        ElementType("u32", np.dtype(np.uint32), 4, "ui32"),
        # AIEX BlockFloatType v8bfp16ebs8: 8 int8 mantissas + 1 shared exponent
        ElementType("bfp16ebs8", np.dtype((np.void, 9)), 9, '!aiex.bfp<"v8bfp16ebs8">', 8),
    )
}
#: each type's `value_range`, asked of numpy once (a design makes a call per
#: core and kernel, each scalar argument judged by it)
_VALUE_RANGES = types.MappingProxyType({n: t.value_range for n, t in ELEMENT_TYPES.items()})
_NUMPY_NAMES = {
    "float32": "f32",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
}


def element_type(value) -> ElementType:
    """The element type named `value` ("bf16", "i32"...) or of a numpy dtype."""
    if isinstance(value, ElementType):
        return value
    if isinstance(value, str) and value in ELEMENT_TYPES:
        return ELEMENT_TYPES[value]
    try:
        dtype = np.dtype(value)
    except TypeError:
        dtype = None
    if dtype == ELEMENT_TYPES["bf16"].numpy:
        return ELEMENT_TYPES["bf16"]
    if dtype is not None and dtype.name in _NUMPY_NAMES:
        return ELEMENT_TYPES[_NUMPY_NAMES[dtype.name]]
    raise DesignError(
        f"unsupported element type {value!r}; valid choices: {', '.join(ELEMENT_TYPES)}"
    )


def _dtype(value) -> str:
    return element_type(value).name


# ---- numbers ---------------------------------------------------------------------
# Every number of a design is an int (a numpy integer is taken as one; a bool,
# a float or a string never is) within the range of the MLIR type it becomes:
# the aie and aiex dialects take counts, depths, offsets, lengths, sizes,
# strides, channels and lock values as i32 (AIEI32Attr, I32Attr, `i32`
# operands), loop bounds as `index`. Each value is checked on its own, in
# O(1), when it is built; whether it fits the device is `check`'s question.

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
INDEX_MAX = 2**63 - 1


def _as_int(value):
    """A numpy integer as an int; anything else unchanged, for the validator to judge."""
    return int(value) if isinstance(value, np.integer) else value


def _as_ints(value):
    if _ints_within(value, -math.inf, math.inf):
        return value  # nothing to convert (most tuples of a design: built per statement)
    try:
        return tuple(_as_int(v) for v in value)
    except TypeError:
        return value


def _ints_within(values, low: float, high: float) -> bool:
    """`values` is a tuple of exact ints (no bool, no numpy integer) in
    `low`..`high`: the common case of a tuple field, judged without
    converting it or building an error's words."""
    if type(values) is not tuple:
        return False
    for v in values:  # a loop: twice as fast as all() over a generator here  # noqa: SIM110
        if type(v) is not int or not low <= v <= high:
            return False
    return True


def require_int(what: str, value, low: int | None = None, high: int | None = None) -> int:
    """`value` if it is an int in `low`..`high`, else `DesignError` naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DesignError(f"{what} is an int, got {type(value).__name__} {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{'' if low is None else low}..{'' if high is None else high}"
        raise DesignError(f"{what} = {value} is outside {bounds}")
    return value


def _label(instance) -> str:
    """How an error names the value a field belongs to."""
    kind = {
        "ObjectFifo": "fifo",
        "LocalBuffer": "local buffer",
        "Tensor": "tensor",
        "Worker": "worker",
        "Link": "link",
    }.get(type(instance).__name__)
    if type(instance).__name__ == "Memref":
        return "a kernel's Memref"
    if kind is not None:
        return f"{kind} {instance.name}"
    return type(instance).__name__


def _int(low: int | None = None, high: int | None = I32_MAX, *, optional: bool = False):
    """An attrs validator: the field is an int in `low`..`high` (or None)."""

    def validate(instance, attribute, value) -> None:
        if type(value) is int and (low is None or low <= value) and (high is None or value <= high):
            return  # the common case, without building the error's words
        if value is None and optional:
            return
        require_int(f"{_label(instance)}: {attribute.name}", value, low, high)

    return validate


def _ints_each(low: int | None = None, high: int | None = I32_MAX):
    """An attrs validator: the field is a tuple of ints in `low`..`high`."""

    bounds = (-math.inf if low is None else low, math.inf if high is None else high)

    def validate(instance, attribute, value) -> None:
        if _ints_within(value, *bounds):
            return
        if not isinstance(value, tuple):
            raise DesignError(f"{_label(instance)}: {attribute.name} is a sequence, got {value!r}")
        for i, item in enumerate(value):
            require_int(f"{_label(instance)}: {attribute.name}[{i}]", item, low, high)

    return validate


def _bool(instance, attribute, value) -> None:
    if not isinstance(value, bool):
        raise DesignError(
            f"{_label(instance)}: {attribute.name} is a bool, got {type(value).__name__} {value!r}"
        )


def _shape(value):
    """A shape as a tuple (an int is a 1-d shape); `_positive_shape` judges it."""
    return (
        (int(value),)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        else _as_ints(value)
    )


def _positive_shape(instance, attribute, shape) -> None:
    """A non-empty shape of positive ints, at most I32_MAX elements (a
    dma_bd's offset and length into it are i32 elements)."""
    where = f"{_label(instance)}: {attribute.name}"
    if not isinstance(shape, tuple) or not shape:
        raise DesignError(f"{where} is a non-empty tuple of positive ints, got {shape!r}")
    for i, dim in enumerate(shape):
        require_int(f"{where}[{i}]", dim, 1, I32_MAX)
    if math.prod(shape) > I32_MAX:
        raise DesignError(
            f"{where} {shape} holds {math.prod(shape)} elements, more than i32 offsets reach "
            f"({I32_MAX})"
        )


def _dims(value) -> tuple[tuple[int, int], ...]:
    """(size, stride) pairs, highest dimension first."""
    pairs = tuple(_as_ints(pair) for pair in (value or ()))
    for i, pair in enumerate(pairs):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise DesignError(f"dimensions are (size, stride) pairs, got {pair!r} in {value!r}")
        require_int(f"dimension {i} size", pair[0], 1, I32_MAX)
        require_int(f"dimension {i} stride", pair[1], I32_MIN, I32_MAX)
    return pairs


# ---- tiles and access patterns ---------------------------------------------------


@attrs.frozen(order=True)
class Tile:
    """A tile of the array: row 0 is the shim, row 1 the memtile, rows 2 and
    up the cores."""

    col: int = attrs.field(converter=_as_int, validator=_int(0))
    row: int = attrs.field(converter=_as_int, validator=_int(0))

    def __str__(self) -> str:
        return f"({self.col}, {self.row})"


@attrs.frozen(init=False)
class TAP:
    """A tensor access pattern: `offset`, then nested loops of `sizes` and
    `strides` (highest first, outermost first), all in elements; at most 4
    dimensions. It numbers the elements it visits in visit order."""

    offset: int = attrs.field(converter=_as_int, validator=_int(I32_MIN))
    sizes: tuple[int, ...] = attrs.field(converter=_as_ints, validator=_ints_each(1))
    strides: tuple[int, ...] = attrs.field(converter=_as_ints, validator=_ints_each(I32_MIN))

    def __init__(self, offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> None:
        # a sequence makes one TAP per statement, nearly always of exact ints
        # in range: those need neither the fields' converters nor validators
        if (
            type(offset) is int
            and I32_MIN <= offset <= I32_MAX
            and _ints_within(sizes, 1, I32_MAX)
            and _ints_within(strides, I32_MIN, I32_MAX)
        ):
            object.__setattr__(self, "offset", offset)
            object.__setattr__(self, "sizes", sizes)
            object.__setattr__(self, "strides", strides)
            self.__attrs_post_init__()
        else:  # the fields' own converters and checks, and their errors
            self.__attrs_init__(offset, sizes, strides)

    def __attrs_post_init__(self) -> None:
        if len(self.sizes) != len(self.strides) or not 1 <= len(self.sizes) <= 4:
            raise DesignError(
                f"a TAP has 1 to 4 dimensions, as many sizes as strides; got sizes "
                f"{list(self.sizes)} and strides {list(self.strides)}"
            )
        # a shim BD moves the lower three dimensions as one dma_bd, whose
        # `len` is an i32; the highest of four is the task's repeat count
        length = math.prod(self.sizes[-3:])
        if length > I32_MAX:
            raise DesignError(
                f"TAP {self}: its BD moves {length} elements (the product of its lowest three "
                f"sizes), more than a dma_bd's i32 len holds ({I32_MAX})"
            )

    @classmethod
    def linear(cls, count: int, offset: int = 0) -> TAP:
        """`count` consecutive elements from `offset`."""
        return cls(offset, (count,), (1,))

    @classmethod
    def of_dims(cls, dims, offset: int = 0) -> TAP:
        """The TAP of mlir-aie (size, stride) pairs."""
        return cls(offset, tuple(s for s, _ in dims), tuple(t for _, t in dims))

    @property
    def count(self) -> int:
        """Elements visited (with repeats)."""
        return math.prod(self.sizes)

    def padded(self, dims: int = 4) -> TAP:
        """The same pattern with unit dimensions in front, up to `dims`."""
        extra = dims - len(self.sizes)
        if extra <= 0:
            return self
        if dims > 4:
            return TAP(self.offset, (1,) * extra + self.sizes, (0,) * extra + self.strides)
        # unit dimensions in front, up to 4, keep every rule `__init__`
        # checked (the lowest three's product included)
        return TAP._checked(self.offset, (1,) * extra + self.sizes, (0,) * extra + self.strides)

    @classmethod
    def _checked(cls, offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> TAP:
        """A TAP of fields known valid (derived from a checked TAP by a rule
        that keeps them so), made without converting or checking them again."""
        tap = object.__new__(cls)
        object.__setattr__(tap, "offset", offset)
        object.__setattr__(tap, "sizes", sizes)
        object.__setattr__(tap, "strides", strides)
        return tap

    def indices(self) -> np.ndarray:
        """Element offsets in visit order (int64), computed without a Python
        loop per element."""
        index = np.full(1, self.offset, dtype=np.int64)
        for size, stride in zip(self.sizes, self.strides):
            index = (index[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
        return index

    def __str__(self) -> str:
        return f"[{self.offset}][{', '.join(map(str, self.sizes))}][{', '.join(map(str, self.strides))}]"


# ---- runtime tensors, kernels ----------------------------------------------------------


@attrs.frozen
class Tensor:
    """A runtime argument of the design, in argument order."""

    name: str
    shape: tuple[int, ...] = attrs.field(converter=_shape, validator=_positive_shape)
    dtype: str = attrs.field(converter=_dtype)
    direction: Direction = attrs.field(default=Direction.IN, converter=Direction)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * element_type(self.dtype).nbytes


@attrs.frozen
class Memref:
    """A kernel argument that is a buffer: an acquired object or a core buffer."""

    shape: tuple[int, ...] = attrs.field(converter=_shape, validator=_positive_shape)
    dtype: str = attrs.field(converter=_dtype)

    def __str__(self) -> str:
        return f"memref<{'x'.join(map(str, self.shape))}x{element_type(self.dtype).mlir}>"


@attrs.frozen
class Scalar:
    """A kernel argument passed by value."""

    dtype: str = attrs.field(default="i32", converter=_dtype)

    def __str__(self) -> str:
        return element_type(self.dtype).mlir


KernelArg = Memref | Scalar


#: where mlir-aie's sources live in its install: the kernel tree, and the
#: runtime library (``aie_runtime_lib/AIE2/lut_based_ops.cpp`` and its header)
AIE_KERNELS = "include/aie_kernels"
AIE_RUNTIME_LIB = "aie_runtime_lib"
_DEFINE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(=.*)?\Z")


@attrs.frozen
class KernelSource:
    """Where a kernel's C++ lives: a file of mlir-aie's install (`package`
    None; under `tree`, the kernel tree unless `aie_runtime_lib`), or a file
    shipped inside the Python package `package`. "{arch}" in a path becomes
    aie2 or aie2p, "{ARCH}" AIE2 or AIE2P (the runtime library's spelling).

    What the kernel's one object needs beyond that file: `extra_sources`
    compiled beside it and combined into the same object (mlir-aie's aie2
    activations need the tables of ``lut_based_ops.cpp``), `include_dirs`
    (directories, found as sources are) and `defines` (``NAME`` or
    ``NAME=VALUE``), both applied to every source of the object."""

    file: str
    package: str | None = None
    extra_sources: tuple[KernelSource, ...] = attrs.field(default=(), converter=tuple)
    include_dirs: tuple[KernelSource, ...] = attrs.field(default=(), converter=tuple)
    defines: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    tree: str = AIE_KERNELS

    def __attrs_post_init__(self) -> None:
        where = f"kernel source {self.file}"
        for part in (*self.extra_sources, *self.include_dirs):
            if not isinstance(part, KernelSource):
                raise DesignError(
                    f"{where}: extra sources and include dirs are KernelSource values "
                    f"(aie_kernels, aie_runtime_lib or shipped), got {part!r}"
                )
            if part.extra_sources or part.include_dirs or part.defines:
                raise DesignError(
                    f"{where}: {part.file} is one file or directory of the same object; give "
                    "its extra sources, include dirs and defines to the main source"
                )
        bad = [d for d in self.defines if not isinstance(d, str) or not _DEFINE.match(d)]
        if bad:
            raise DesignError(
                f"{where}: a define is NAME or NAME=VALUE (no -D), NAME an identifier; "
                f"got {bad[0]!r}"
            )

    def path_for(self, arch: str) -> str:
        return self.file.replace("{arch}", arch).replace("{ARCH}", arch.upper())

    @property
    def parts(self) -> tuple[KernelSource, ...]:
        """Every source compiled into the object, the main one first."""
        return (self, *self.extra_sources)


def aie_kernels(file: str, *, extra_sources=(), include_dirs=(), defines=()) -> KernelSource:
    """A source of mlir-aie's kernel tree, e.g. ``aie_kernels("{arch}/add.cc")``."""
    return KernelSource(file, None, extra_sources, include_dirs, defines)


def aie_runtime_lib(file: str) -> KernelSource:
    """A file or directory of mlir-aie's runtime library, e.g.
    ``aie_runtime_lib("{ARCH}/lut_based_ops.cpp")``."""
    return KernelSource(file, tree=AIE_RUNTIME_LIB)


def shipped(
    package: str, file: str, *, extra_sources=(), include_dirs=(), defines=()
) -> KernelSource:
    """A source shipped in a Python package, e.g. ``shipped("iron.design", "kernels/add_one.cc")``."""
    return KernelSource(file, package, extra_sources, include_dirs, defines)


def model_name(model: Callable) -> str:
    """A stable name of a kernel model: `module:qualname` of a module-level
    function (with the arguments of a `functools.partial`)."""
    if isinstance(model, functools.partial):
        bound = [repr(a) for a in model.args] + [f"{k}={v!r}" for k, v in model.keywords.items()]
        return f"{model_name(model.func)}({', '.join(bound)})"
    module, qualname = getattr(model, "__module__", None), getattr(model, "__qualname__", "")
    if not module or not qualname or "<" in qualname:
        raise DesignError(
            f"a kernel model must be a module-level function (or a functools.partial of one) "
            f"so that designs pickle and digest alike in every process; got {model!r}"
        )
    return f"{module}:{qualname}"


@attrs.frozen
class Kernel:
    """A core function: its `symbol`, argument types and source, and `model`,
    a numpy function with the kernel's exact arithmetic. The simulator calls
    ``model(*args)`` with writable views of the buffers and ints for scalars;
    the model writes its outputs in place, as the C++ does."""

    symbol: str
    args: tuple[KernelArg, ...] = attrs.field(converter=tuple)
    source: KernelSource
    model: Callable
    flags: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        model_name(self.model)
        bad = [a for a in self.args if not isinstance(a, (Memref, Scalar))]
        if bad:
            raise DesignError(
                f"kernel {self.symbol}: arguments are Memref or Scalar, got {bad[0]!r}"
            )

    @property
    def object_file(self) -> str:
        return f"{self.symbol}.o"


# ---- object fifos and links -----------------------------------------------------------


@attrs.frozen
class Endpoint:
    """One end of an object fifo: the runtime through a shim tile, a memtile
    link, or a core worker (by name). `depth` overrides the fifo's depth for
    this endpoint's buffer pool; `dims_from_stream` (consumers) says where
    the stream's elements land in the object; `channel` pins the DMA channel
    the end takes on its tile (else the lowering takes the lowest free one)."""

    kind: str  # shim | memtile | core
    name: str = ""  # the link or worker
    depth: int | None = attrs.field(
        default=None, converter=_as_int, validator=_int(1, optional=True)
    )
    dims_from_stream: tuple[tuple[int, int], ...] = attrs.field(default=(), converter=_dims)
    tile: Tile | None = None
    #: the DMA channel this end takes on its tile (mlir-aie's prod_dma_channel /
    #: cons_dma_channels); None lets the lowering take the lowest free one
    channel: int | None = attrs.field(
        default=None,
        converter=_as_int,
        validator=_int(0, optional=True),
        metadata={"omitted_at_default": True},
    )

    def __attrs_post_init__(self) -> None:
        if self.kind not in ("shim", "memtile", "core"):
            raise DesignError(f"endpoint kinds are shim, memtile and core, got {self.kind!r}")
        if (self.kind == "shim") == bool(self.name):
            raise DesignError(
                f"a {self.kind} endpoint {'has no' if self.kind == 'shim' else 'names its'} "
                f"{'name' if self.kind == 'shim' else 'link or worker'}; got {self.name!r}"
            )

    @property
    def label(self) -> str:
        return "runtime" if self.kind == "shim" else f"{self.kind} {self.name}"


def shim(col: int | None = None, *, channel: int | None = None) -> Endpoint:
    """The runtime's end, through the shim tile of column `col` (placed if None)."""
    return Endpoint("shim", tile=None if col is None else Tile(col, 0), channel=channel)


def memtile(
    link: str, *, depth: int | None = None, dims_from_stream=(), channel: int | None = None
) -> Endpoint:
    """The end held by memtile link `link`."""
    return Endpoint("memtile", link, depth, dims_from_stream, channel=channel)


def core(
    worker: str, *, depth: int | None = None, dims_from_stream=(), channel: int | None = None
) -> Endpoint:
    """The end held by worker `worker`."""
    return Endpoint("core", worker, depth, dims_from_stream, channel=channel)


@attrs.frozen
class ObjectFifo:
    """A ring of `depth` objects of `shape` and `dtype` from one producer to
    one or more consumers (a broadcast). `dims_to_stream` is the order in
    which the producer's DMA reads an object; `repeat_count` sends each
    object that many times; `iter_count` stops a memtile fifo's DMA after
    that many passes over its objects. The pools each end gets are sized
    from the depths as mlir-aie sizes them: one depth for every end lets a
    core's pool be its largest acquire plus one (`iron.design.lower`)."""

    name: str
    shape: tuple[int, ...] = attrs.field(converter=_shape, validator=_positive_shape)
    dtype: str = attrs.field(converter=_dtype)
    producer: Endpoint
    consumers: tuple[Endpoint, ...] = attrs.field(converter=tuple)
    depth: int = attrs.field(default=2, converter=_as_int, validator=_int(1))
    dims_to_stream: tuple[tuple[int, int], ...] = attrs.field(default=(), converter=_dims)
    repeat_count: int | None = attrs.field(
        default=None, converter=_as_int, validator=_int(1, optional=True)
    )
    iter_count: int | None = attrs.field(
        default=None, converter=_as_int, validator=_int(1, optional=True)
    )

    def __attrs_post_init__(self) -> None:
        where = f"fifo {self.name}"
        if not self.consumers:
            raise DesignError(f"{where}: needs at least one consumer")
        if self.producer.dims_from_stream:
            raise DesignError(f"{where}: dims_from_stream belongs to consumers, not the producer")
        labels = [e.label for e in (self.producer, *self.consumers)]
        if len(set(labels)) != len(labels):
            raise DesignError(f"{where}: an endpoint appears twice ({', '.join(labels)})")

    @property
    def element(self) -> ElementType:
        return element_type(self.dtype)

    @property
    def size(self) -> int:
        """Elements per object."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes per object."""
        return self.size * self.element.nbytes

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return (self.producer, *self.consumers)

    def depth_at(self, endpoint: Endpoint) -> int:
        return endpoint.depth if endpoint.depth is not None else self.depth

    def consumer(self, kind: str, name: str = "") -> Endpoint | None:
        return next((c for c in self.consumers if (c.kind, c.name) == (kind, name)), None)

    def role_of(self, kind: str, name: str) -> str | None:
        """ "produce", "consume" or None: what the actor `name` does with this fifo."""
        if (self.producer.kind, self.producer.name) == (kind, name):
            return "produce"
        return "consume" if self.consumer(kind, name) is not None else None


@attrs.frozen
class Link:
    """A memtile link: objects of the `sources` fifos become objects of the
    `destinations` fifos. One to one is a forward; one to many a split (each
    destination takes its lane of the source object); many to one a join
    (each source fills its lane of the destination object). Offsets count
    elements of the larger object, rising in the order the fifos are listed.

    As mlir-aie lowers it (`link_lanes`), lane i spans its offset up to the
    next one (the last lane: to the end of the larger object), one BD per
    lane, so a lane's span is a whole number of its fifo's objects: a gap
    after a lane's object is more of its objects, and only elements before
    the first offset are never moved.

    A forward's objects are whole multiples of one another: the memtile pool
    holds the larger ones and moves them whole on both channels, so smaller
    destination objects split a source object, and larger ones gather
    several source objects.

    A `programmed` forward is a pool the runtime drives: its memtile DMAs
    run no chain of their own. Each slot (source object) has its own
    producer and consumer lock, both starting at 0; the runtime sequence
    sets producer locks (`SetLock`) and pushes chains of slot BDs onto the
    memtile's two channels (`PoolTask`), each BD acquiring and releasing by
    any value the device's locks hold. So one image serves pools whose
    replay count and slot count are per-call values (a resident weight
    block read once from DDR and sent to the cores many times)."""

    name: str
    sources: tuple[str, ...] = attrs.field(converter=tuple)
    destinations: tuple[str, ...] = attrs.field(converter=tuple)
    offsets: tuple[int, ...] = attrs.field(default=(), converter=_as_ints, validator=_ints_each(0))
    tile: Tile | None = None
    programmed: bool = attrs.field(default=False, validator=_bool)

    def __attrs_post_init__(self) -> None:
        where = f"link {self.name}"
        if not self.sources or not self.destinations:
            raise DesignError(f"{where}: needs sources and destinations")
        if len(self.sources) > 1 and len(self.destinations) > 1:
            raise DesignError(f"{where}: many to many is not a link; split or join")
        many = max(len(self.sources), len(self.destinations))
        if self.offsets and len(self.offsets) != many:
            raise DesignError(f"{where}: {len(self.offsets)} offsets for {many} fifos")
        if self.programmed and many > 1:
            raise DesignError(f"{where}: a programmed pool is a forward of one fifo to one")

    @property
    def kind(self) -> str:
        if len(self.destinations) > 1:
            return "split"
        return "join" if len(self.sources) > 1 else "forward"

    @property
    def fifos(self) -> tuple[str, ...]:
        return (*self.sources, *self.destinations)


def forward(
    name: str, source: str, destination: str, *, tile: Tile | None = None, programmed=False
) -> Link:
    return Link(name, (source,), (destination,), tile=tile, programmed=programmed)


def split(name: str, source: str, destinations, offsets, *, tile: Tile | None = None) -> Link:
    return Link(name, (source,), tuple(destinations), tuple(offsets), tile)


def join(name: str, sources, destination: str, offsets, *, tile: Tile | None = None) -> Link:
    return Link(name, tuple(sources), (destination,), tuple(offsets), tile)


# ---- worker bodies ----------------------------------------------------------------


@attrs.frozen
class Param:
    """A per-call runtime parameter (an int32 word of the scratchpad), by name.

    In a design's `params`, `member` says what the word carries: the
    operator's per-call member of that name (`Param("out_offset",
    member="out_offset")`). A parameter declared without one is derived:
    the operator's `runtime_params(**values)` computes it from its
    dispatch-time values (a slab count, a loop trip). Dispatch binds each
    by what it is, never by matching names."""

    name: str
    member: str | None = attrs.field(
        default=None, kw_only=True, metadata={"omitted_at_default": True}
    )


@attrs.frozen
class Obj:
    """The `index`-th object of fifo `fifo` that the worker holds (oldest first)."""

    fifo: str
    index: int = attrs.field(default=0, converter=_as_int, validator=_int(0))


@attrs.frozen
class Buf:
    """A core-local buffer of the worker, by name."""

    name: str


@attrs.frozen
class LocalBuffer:
    """Core memory a worker owns across iterations (an accumulator, a table).

    Core memory is not cleared: the buffer holds garbage until the worker
    writes it, unless it has an `initial_value` (every element), which the
    core's image carries (mlir-aie's `aie.buffer ... = dense<v>`)."""

    name: str
    shape: tuple[int, ...] = attrs.field(converter=_shape, validator=_positive_shape)
    dtype: str = attrs.field(converter=_dtype)
    initial_value: int | float | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        value, kind = self.initial_value, element_type(self.dtype)
        if value is None:
            return
        where = f"local buffer {self.name}: initial_value"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DesignError(f"{where} is an int or a float, got {value!r}")
        if kind.block_float:
            raise DesignError(f"{where}: {kind.name} holds blocks, not values to fill with")
        if kind.floating:
            if not abs(value) <= (largest := float(ml_dtypes.finfo(kind.numpy).max)):
                raise DesignError(
                    f"{where} must be a finite {kind.name} (|value| <= {largest:.4g}), "
                    f"got {value!r}"
                )
        else:
            info = np.iinfo(kind.numpy)
            if not isinstance(value, int) or not info.min <= value <= info.max:
                raise DesignError(
                    f"{where} must be an int in [{info.min}, {info.max}] for {kind.name}, "
                    f"got {value!r}"
                )

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * element_type(self.dtype).nbytes


CallArg = Obj | Buf | Param | int


@attrs.frozen
class Acquire:
    """Hold `n` objects of `fifo` (cumulative: objects already held count)."""

    fifo: str
    n: int = attrs.field(default=1, converter=_as_int, validator=_int(1))


@attrs.frozen
class Release:
    """Hand the `n` oldest held objects of `fifo` to the other side."""

    fifo: str
    n: int = attrs.field(default=1, converter=_as_int, validator=_int(1))


@attrs.frozen
class Call:
    """Call `kernel` on acquired objects, core buffers, parameters and ints:
    one per argument, a buffer (Obj or Buf) for a Memref, an int (in the
    scalar type's range) or a Param for a Scalar."""

    kernel: Kernel
    args: tuple[CallArg, ...] = attrs.field(converter=_as_ints)

    def __attrs_post_init__(self) -> None:
        symbol = self.kernel.symbol
        if len(self.args) != len(self.kernel.args):
            raise DesignError(
                f"kernel {symbol} takes {len(self.kernel.args)} arguments, called with "
                f"{len(self.args)}"
            )
        for position, (arg, want) in enumerate(zip(self.args, self.kernel.args)):
            if isinstance(want, Memref) and not isinstance(arg, (Obj, Buf)):
                raise DesignError(
                    f"kernel {symbol} argument {position} is a buffer ({want}): an acquired "
                    f"object (Obj) or a core buffer (Buf), got {arg!r}"
                )
            if isinstance(want, Scalar) and (
                isinstance(arg, bool) or not isinstance(arg, (int, Param))
            ):
                raise DesignError(
                    f"kernel {symbol} argument {position} is a scalar ({want.dtype}): an int or a "
                    f"Param, got {arg!r}"
                )
            if isinstance(want, Scalar) and isinstance(arg, int):
                low, high = _VALUE_RANGES[want.dtype]
                require_int(f"kernel {self.kernel.symbol} argument {position}", arg, low, high)
            if isinstance(want, Scalar) and isinstance(arg, Param) and want.dtype != "i32":
                raise DesignError(
                    f"kernel {self.kernel.symbol} argument {position}: parameter {arg.name} is "
                    f"an i32 word, the kernel takes {want.dtype}"
                )


@attrs.frozen
class WaitBarrier:
    """Block until the runtime has set `barrier` to `value` (mlir-aie's
    `wait_for_value`: an acquire-equal on the barrier's lock)."""

    barrier: str
    value: int = attrs.field(default=1, converter=_as_int, validator=_int(0))


@attrs.frozen
class ReleaseBarrier:
    """Add `value` to this worker's lock of `barrier` (mlir-aie's
    `release_with_value`: a Release on the barrier's lock), telling the
    runtime (or the next `WaitBarrier`) how far the worker has come."""

    barrier: str
    value: int = attrs.field(default=1, converter=_as_int, validator=_int(1))


@attrs.frozen
class Loop:
    """Run `body` `count` times; `count` may be a runtime `Param`."""

    count: int | Param = attrs.field(converter=_as_int)
    body: tuple[Op, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.count, Param):  # scf.for bounds are `index`
            require_int("loop count", self.count, 0, INDEX_MAX)


Op = Acquire | Release | Call | WaitBarrier | ReleaseBarrier | Loop


def walk(body) -> list:
    """Every op of `body`, loops entered, in program order."""
    out = []
    for op in body:
        out.append(op)
        if isinstance(op, Loop):
            out += walk(op.body)
    return out


@attrs.frozen
class Worker:
    """A core program. With `forever` (mlir-aie's `while_true`) the body
    repeats until the device is reset; `stack_size` None takes the device's
    default."""

    name: str
    body: tuple[Op, ...] = attrs.field(converter=tuple)
    tile: Tile | None = None
    stack_size: int | None = attrs.field(
        default=None, converter=_as_int, validator=_int(0, optional=True)
    )
    buffers: tuple[LocalBuffer, ...] = attrs.field(default=(), converter=tuple)
    forever: bool = attrs.field(default=True, validator=_bool)

    def calls(self) -> list[Call]:
        return [op for op in walk(self.body) if isinstance(op, Call)]


# ---- the runtime sequence -------------------------------------------------------------


@attrs.frozen
class Fill:
    """A shim DMA task moving `tensor` (through `tap`; None: all of it, in
    order) into `fifo`. Tasks with `wait` are awaited when their `group`
    finishes; the others are freed then. `offset_param` names a runtime
    parameter added to the TAP's offset, in elements, per call (mlir-aie's
    `offset_parameter`: a scratchpad word patched into the BD's address)."""

    fifo: str
    tensor: str
    tap: TAP | None = None
    wait: bool = attrs.field(default=False, validator=_bool)
    group: str = "default"
    offset_param: str | None = None


@attrs.frozen
class Drain:
    """A shim DMA task moving `fifo`'s objects into `tensor` through `tap`
    (`offset_param` as for `Fill`)."""

    fifo: str
    tensor: str
    tap: TAP | None = None
    wait: bool = attrs.field(default=True, validator=_bool)
    group: str = "default"
    offset_param: str | None = None


@attrs.frozen
class Finish:
    """Await the waited tasks of `group`, then free all of its tasks. Groups
    left open finish at the end of the sequence, in the order they began."""

    group: str = "default"


@attrs.frozen
class SetBarrier:
    """Set worker barrier `barrier` to `value`."""

    barrier: str
    value: int = attrs.field(default=1, converter=_as_int, validator=_int(0))


@attrs.frozen
class SlotBd:
    """One BD of a `PoolTask`: moves slot `slot` of the pool whole. A fill BD
    acquires the slot's producer lock by `acquire` and releases its consumer
    lock by `release`; a drain BD the other way round."""

    slot: int = attrs.field(converter=_as_int, validator=_int(0))
    acquire: int = attrs.field(default=1, converter=_as_int, validator=_int(I32_MIN))
    release: int = attrs.field(default=1, converter=_as_int, validator=_int(I32_MIN))


@attrs.frozen
class PoolTask:
    """A chain of slot BDs pushed onto a programmed link's memtile channel,
    walked `repeat_count` times: `fill` takes the source fifo's stream into
    slots (S2MM), otherwise the slots go out to the destination fifo
    (MM2S). The push holds a slot of the channel's task queue until its
    `group` finishes (the runtime never awaits it: the data it moves is
    awaited through the tasks that depend on it)."""

    link: str
    fill: bool = attrs.field(validator=_bool)
    bds: tuple[SlotBd, ...] = attrs.field(converter=tuple)
    # the task's repeat_count attribute is repeats - 1, an i32
    repeat_count: int = attrs.field(default=1, converter=_as_int, validator=_int(1, I32_MAX + 1))
    group: str = "default"


@attrs.frozen
class SetLock:
    """Set the producer lock of slot `slot` of programmed link `link` to
    `value` (`aiex.set_lock`): how the runtime arms a pool for this call,
    whatever the previous call left there."""

    link: str
    slot: int = attrs.field(converter=_as_int, validator=_int(0))
    value: int = attrs.field(converter=_as_int, validator=_int(I32_MIN))


Statement = Fill | Drain | Finish | SetBarrier | PoolTask | SetLock


# ---- the design ---------------------------------------------------------------------


@attrs.frozen
class Design:
    """One operator's program for one device."""

    name: str
    device: Device
    tensors: tuple[Tensor, ...] = attrs.field(converter=tuple)
    fifos: tuple[ObjectFifo, ...] = attrs.field(converter=tuple)
    workers: tuple[Worker, ...] = attrs.field(converter=tuple)
    sequence: tuple[Statement, ...] = attrs.field(converter=tuple)
    links: tuple[Link, ...] = attrs.field(default=(), converter=tuple)
    #: parameter names; a `Param(name, member=...)` here declares what it carries
    params: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    barriers: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: (parameter, per-call member it carries); the other parameters are derived
    members: tuple[tuple[str, str], ...] = attrs.field(
        default=(), converter=tuple, metadata={"omitted_at_default": True}
    )

    def __attrs_post_init__(self) -> None:
        if any(isinstance(p, Param) for p in self.params):  # declared by what each carries
            carried = tuple(
                (p.name, p.member) for p in self.params if isinstance(p, Param) and p.member
            )
            names = tuple(p.name if isinstance(p, Param) else p for p in self.params)
            object.__setattr__(self, "members", (*self.members, *carried))
            object.__setattr__(self, "params", names)
        _check_structure(self)

    def member(self, param: str) -> str | None:
        """The per-call member parameter `param` carries; None: derived."""
        return dict(self.members).get(param)

    # ---- lookups ----

    def tensor(self, name: str) -> Tensor:
        return _find(self, "tensor", self.tensors, name)

    def fifo(self, name: str) -> ObjectFifo:
        return _find(self, "fifo", self.fifos, name)

    def worker(self, name: str) -> Worker:
        return _find(self, "worker", self.workers, name)

    def link(self, name: str) -> Link:
        return _find(self, "link", self.links, name)

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        """Distinct kernels, in order of first call."""
        seen: dict[Kernel, None] = {}
        for worker in self.workers:
            for call in worker.calls():
                seen.setdefault(call.kernel)
        return tuple(seen)

    def tasks(self) -> list[Fill | Drain]:
        return [s for s in self.sequence if isinstance(s, (Fill, Drain))]

    # ---- identity ----

    def digest(self) -> str:
        """A digest of everything the design says, equal in every process."""
        return hashlib.sha256(canonical(self).encode()).hexdigest()[:32]


def _find(design: Design, what: str, items, name: str):
    for item in items:
        if item.name == name:
            return item
    known = ", ".join(i.name for i in items) or "none"
    raise KeyError(f"design {design.name} has no {what} {name!r} ({what}s: {known})")


def canonical(value) -> str:
    """Stable text of a design value: attrs classes by field, callables by
    module and name, devices by every field. A field added after designs were
    first digested (metadata `omitted_at_default`) is left out at its default,
    so that adding it moved no digest."""
    return _Canonical().text(value)


_KEPT = object()


class _Canonical:
    """One walk of `canonical`. A digest walks thousands of values of few
    types, many met more than once (a kernel at each of its calls): how
    each type is written is decided once (the rules depend on the type
    alone), and each attrs value met is written once (by identity: every
    value met is held by the value walked, so no id is reused meanwhile)."""

    def __init__(self) -> None:
        self.hows: dict[type, object] = {}
        self.written: dict[int, str] = {}

    def text(self, value) -> str:
        how = self.hows.get(type(value)) or self._how(type(value), value)
        if how is repr:
            return repr(value)
        if how is tuple:
            return "(" + ", ".join([self.text(v) for v in value]) + ")"
        if type(how) is tuple:  # an attrs class: its name, (field, default left out or _KEPT)
            text = self.written.get(id(value))
            if text is None:
                name, fields = how
                parts = []
                for field, omitted in fields:
                    item = getattr(value, field)
                    if omitted is _KEPT or item != omitted:
                        parts.append(f"{field}={self.text(item)}")
                text = self.written[id(value)] = f"{name}({', '.join(parts)})"
            return text
        return how(value)

    def _how(self, kind: type, value):
        """How to write `value`, an instance of `kind`, and all of `kind`."""
        if issubclass(kind, (bool, int, str, float, type(None))):
            how = repr
        elif issubclass(kind, np.generic):
            how = _generic_text
        elif issubclass(kind, Direction):
            how = _direction_text
        elif issubclass(kind, (tuple, list)):
            how = tuple
        elif attrs.has(kind):
            how = (
                kind.__name__,
                tuple(
                    (f.name, f.default if f.metadata.get("omitted_at_default") else _KEPT)
                    for f in attrs.fields(kind)
                ),
            )
        elif callable(value):  # a type's instances are all callable or none is
            how = model_name
        else:
            how = _no_text
        self.hows[kind] = how
        return how


def _generic_text(value: np.generic) -> str:
    return repr(value.item())


def _direction_text(value: Direction) -> str:
    return value.value


def _no_text(value) -> str:
    raise TypeError(f"no stable text for {value!r} in a design")


# ---- structure ----------------------------------------------------------------


def _unique(design: Design, what: str, names) -> None:
    counts = collections.Counter(names)
    twice = sorted(n for n, times in counts.items() if times > 1)
    if twice:
        raise DesignError(f"design {design.name}: {what} names repeat: {', '.join(twice)}")


def _check_structure(design: Design) -> None:
    """Names resolve and every actor's use of a fifo agrees with the fifo's
    endpoints. Device limits are `check`'s business, not this one's."""
    name = design.name
    _unique(design, "tensor", (t.name for t in design.tensors))
    _unique(design, "fifo", (f.name for f in design.fifos))
    _unique(design, "worker", (w.name for w in design.workers))
    _unique(design, "link", (k.name for k in design.links))
    _unique(design, "parameter", design.params)
    for param, _ in design.members:
        if param not in design.params:
            raise DesignError(
                f"design {design.name}: member of parameter {param!r}, which the design "
                f"does not declare (params: {', '.join(design.params) or 'none'})"
            )
    _unique(design, "barrier", design.barriers)
    fifos = {f.name: f for f in design.fifos}
    workers = {w.name: w for w in design.workers}
    links = {k.name: k for k in design.links}
    tensors = {t.name: t for t in design.tensors}
    roles = _roles(design.fifos)
    linked = collections.defaultdict(list)  # link -> the fifos that name it, in order
    for fifo in design.fifos:
        for endpoint in fifo.endpoints:
            if endpoint.kind == "memtile":
                linked[endpoint.name].append(fifo.name)

    for fifo in design.fifos:
        for endpoint in fifo.endpoints:
            if endpoint.kind == "core" and endpoint.name not in workers:
                raise DesignError(
                    f"design {name}: fifo {fifo.name} names worker {endpoint.name!r}, "
                    "which the design does not have"
                )
            if endpoint.kind == "memtile" and endpoint.name not in links:
                raise DesignError(
                    f"design {name}: fifo {fifo.name} names link {endpoint.name!r}, "
                    "which the design does not have"
                )
            if endpoint.tile is not None and endpoint.kind != "shim":
                raise DesignError(
                    f"design {name}: fifo {fifo.name}: pin the {endpoint.label} on the "
                    f"{'worker' if endpoint.kind == 'core' else 'link'}, not on the endpoint"
                )

    for link in design.links:
        where = f"design {name}: link {link.name}"
        for fifo_name in link.fifos:
            if fifo_name not in fifos:
                raise DesignError(f"{where}: no fifo {fifo_name!r}")
        for fifo_name in link.sources:
            if roles.get((fifo_name, "memtile", link.name)) != "consume":
                raise DesignError(
                    f"{where}: source fifo {fifo_name} must list memtile({link.name!r}) as a consumer"
                )
        for fifo_name in link.destinations:
            if roles.get((fifo_name, "memtile", link.name)) != "produce":
                raise DesignError(
                    f"{where}: destination fifo {fifo_name} must have memtile({link.name!r}) as its producer"
                )
        types = {fifos[f].dtype for f in link.fifos}
        if len(types) > 1:
            raise DesignError(
                f"{where}: fifos of one link share an element type, got {sorted(types)}"
            )
        if link.kind == "forward":
            sizes = sorted((fifos[f].size for f in link.fifos), reverse=True)
            if sizes[0] % sizes[1]:
                raise DesignError(
                    f"{where}: a forward's objects are whole multiples of one another (the "
                    f"memtile moves the larger ones whole): {sizes[1]} does not divide {sizes[0]}"
                )
        else:
            _check_lanes(design, link, fifos)
        if link.programmed and (
            fifos[link.sources[0]].consumer("memtile", link.name).dims_from_stream
            or fifos[link.destinations[0]].dims_to_stream
        ):
            raise DesignError(f"{where}: a programmed pool moves whole slots, without dimensions")
        for fifo_name in linked[link.name]:
            if fifo_name not in link.fifos:
                raise DesignError(
                    f"{where}: fifo {fifo_name} names the link, which does not list it"
                )

    for worker in design.workers:
        where = f"design {name}: worker {worker.name}"
        _unique(design, f"worker {worker.name} buffer", (b.name for b in worker.buffers))
        buffers = {b.name for b in worker.buffers}
        judged = set()  # ids of ops judged here: a body repeats its ops (loops share them)
        for op in walk(worker.body):
            if id(op) in judged:
                continue
            judged.add(id(op))
            if isinstance(op, (Acquire, Release)):
                if op.fifo not in fifos:
                    raise DesignError(
                        f"{where}: {type(op).__name__.lower()}s unknown fifo {op.fifo!r}"
                    )
                if (op.fifo, "core", worker.name) not in roles:
                    raise DesignError(
                        f"{where}: uses fifo {op.fifo}, which does not list core({worker.name!r}) "
                        "as its producer or a consumer"
                    )
                if op.n < 1:
                    raise DesignError(
                        f"{where}: {type(op).__name__.lower()} of {op.fifo} takes n >= 1, got {op.n}"
                    )
            elif isinstance(op, Loop):
                if isinstance(op.count, Param):
                    _known_param(design, where, op.count)
            elif (
                isinstance(op, (WaitBarrier, ReleaseBarrier)) and op.barrier not in design.barriers
            ):
                verb = "waits on" if isinstance(op, WaitBarrier) else "releases"
                raise DesignError(f"{where}: {verb} undeclared barrier {op.barrier!r}")
            elif isinstance(op, Call):
                for arg in op.args:
                    if isinstance(arg, Obj) and (
                        arg.fifo not in fifos or (arg.fifo, "core", worker.name) not in roles
                    ):
                        raise DesignError(
                            f"{where}: calls {op.kernel.symbol} on fifo {arg.fifo!r}, which it does not use"
                        )
                    if isinstance(arg, Buf) and arg.name not in buffers:
                        raise DesignError(
                            f"{where}: calls {op.kernel.symbol} on unknown buffer {arg.name!r}"
                        )
                    if isinstance(arg, Param):
                        _known_param(design, where, arg)

    # a statement's soundness here depends only on what `_judged` keeps of
    # it, and a sequence repeats few of those (thousands of statements):
    # each is judged once
    sound = set()
    for index, statement in enumerate(design.sequence):
        judged = _judged(statement)
        if judged in sound:
            continue
        where = f"design {name}: sequence[{index}]"
        if isinstance(statement, (Fill, Drain)):
            verb = type(statement).__name__.lower()
            if statement.fifo not in fifos:
                raise DesignError(f"{where}: {verb}s unknown fifo {statement.fifo!r}")
            if statement.tensor not in tensors:
                raise DesignError(f"{where}: {verb}s unknown tensor {statement.tensor!r}")
            fifo = fifos[statement.fifo]
            runtime_end = fifo.producer if isinstance(statement, Fill) else fifo.consumer("shim")
            if runtime_end is None or runtime_end.kind != "shim":
                rule = (
                    "whose producer is not the runtime"
                    if isinstance(statement, Fill)
                    else "which has no runtime consumer"
                )
                raise DesignError(f"{where}: {verb}s fifo {fifo.name}, {rule} (shim())")
            if fifo.dtype != tensors[statement.tensor].dtype:
                raise DesignError(
                    f"{where}: {verb}s {fifo.dtype} fifo {fifo.name} with {tensors[statement.tensor].dtype} "
                    f"tensor {statement.tensor}"
                )
            if statement.offset_param is not None:
                _known_param(design, where, Param(statement.offset_param))
        elif isinstance(statement, SetBarrier):
            if statement.barrier not in design.barriers:
                raise DesignError(f"{where}: sets undeclared barrier {statement.barrier!r}")
        elif isinstance(statement, (PoolTask, SetLock)):
            _check_pool_statement(design, where, links, statement)
        elif not isinstance(statement, Finish):
            raise DesignError(
                f"{where}: {statement!r} is not a Fill, Drain, Finish, SetBarrier, PoolTask "
                "or SetLock"
            )
        if judged is not None:
            sound.add(judged)


def _roles(fifos) -> dict[tuple[str, str, str], str]:
    """(fifo, endpoint kind, endpoint name) -> `ObjectFifo.role_of` there,
    for every endpoint: one lookup per use instead of a scan."""
    roles = {}
    for fifo in fifos:
        for end in fifo.consumers:
            roles.setdefault((fifo.name, end.kind, end.name), "consume")
        roles[fifo.name, fifo.producer.kind, fifo.producer.name] = "produce"
    return roles


def _judged(statement) -> tuple | None:
    """What `_check_structure` judges of a runtime statement (None: no
    judgement to share; its TAP is judged when made)."""
    kind = type(statement)
    if kind is Fill or kind is Drain:
        judged = (kind, statement.fifo, statement.tensor, statement.offset_param)
    elif kind is Finish:
        return (kind,)
    elif kind is SetBarrier:
        judged = (kind, statement.barrier)
    elif kind is SetLock:
        judged = (kind, statement.link, statement.slot)
    elif kind is PoolTask:
        judged = (kind, statement.link, tuple(bd.slot for bd in statement.bds))
    else:
        return None
    try:
        hash(judged)
    except TypeError:  # a name that is no name: judged, and refused, on its own
        return None
    return judged


def _check_pool_statement(design: Design, where: str, links, statement) -> None:
    link = links.get(statement.link)
    if link is None or not link.programmed:
        raise DesignError(f"{where}: {statement.link!r} is not a programmed link of the design")
    source = design.fifo(link.sources[0])
    slots = source.depth_at(source.consumer("memtile", link.name))
    used = (
        [bd.slot for bd in statement.bds] if isinstance(statement, PoolTask) else [statement.slot]
    )
    if isinstance(statement, PoolTask) and not used:
        raise DesignError(f"{where}: a pool task has at least one BD")
    bad = [slot for slot in used if not 0 <= slot < slots]
    if bad:
        raise DesignError(f"{where}: link {link.name} has slots 0..{slots - 1}, not slot {bad[0]}")


def link_offsets(design: Design, link: Link) -> tuple[int, ...]:
    """Each small fifo's offset in the big object: given, or end to end."""
    if link.offsets:
        return link.offsets
    small = link.destinations if link.kind == "split" else link.sources
    sizes = [design.fifo(f).size for f in small]
    return tuple(int(o) for o in np.cumsum([0, *sizes[:-1]]))


def link_lanes(design: Design, link: Link) -> tuple[tuple[str, int, int], ...]:
    """(small fifo, offset, span) of each lane of a split or join, in the
    order listed. As mlir-aie lowers a link, lane i moves its offset up to
    the next lane's (the last lane: up to the end of the big object):
    `ObjectFifoLinkOp::getDistributeTransferLengths` / `getJoinTransferLengths`
    in lib/Dialect/AIE/IR/AIEDialect.cpp. So a gap after a lane's objects is
    not skipped: its elements travel with that lane, as further objects of its
    fifo; only elements before the first offset are never moved."""
    small = link.destinations if link.kind == "split" else link.sources
    big = design.fifo(link.sources[0] if link.kind == "split" else link.destinations[0])
    offsets = link_offsets(design, link)
    ends = (*offsets[1:], big.size)
    return tuple((f, o, e - o) for f, o, e in zip(small, offsets, ends))


def _check_lanes(design: Design, link: Link, fifos) -> None:
    """Each lane spans a whole number (at least one) of its fifo's objects:
    a span shorter than an object (offsets that overlap, or fall) would have
    one object filled from two big objects."""
    big = fifos[link.sources[0] if link.kind == "split" else link.destinations[0]]
    for fifo_name, offset, span in link_lanes(design, link):
        size = fifos[fifo_name].size
        if offset >= big.size or span < size or span % size:
            raise DesignError(
                f"design {design.name}: link {link.name}: fifo {fifo_name} at offset {offset} "
                f"spans {span} elements up to the next offset (the last lane: to the end of "
                f"{big.name}'s {big.size}-element object), not a whole number of its "
                f"{size}-element objects; mlir-aie moves each lane from its offset to the next"
            )


def _known_param(design: Design, where: str, param: Param) -> None:
    if param.name not in design.params:
        raise DesignError(
            f"{where}: uses parameter {param.name!r}, which the design does not declare "
            f"(params: {', '.join(design.params) or 'none'})"
        )
